package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tandemsearch/tandem"
	tandemcluster "github.com/tandemsearch/tandem/cluster"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/evaluate"
	"github.com/tandemsearch/tandem/internal/bench"
)

// Config is one run of the benchmark. Data, Batch and Queries are
// required.
type Config struct {
	Data    string // BEIR directory (corpus.jsonl, queries.jsonl)
	Docs    int    // documents to index (0: all)
	Batch   int    // documents per acknowledged batch
	Queries int    // queries per search mode, at most those of Data
	Model   string // the dense model's name, as engine.Options.Dense takes it
	Late    bool   // index late interaction too (three more copies of every token matrix in memory)
	Dir     string // working directory (empty: a temporary one, removed afterwards)

	// Log receives the progress lines (nil: nothing).
	Log io.Writer
}

// Report is what a run measured.
type Report struct {
	Docs  int    // documents written
	Batch int    // documents per batch
	Model string // the dense (and late) model
	Late  bool   // late interaction indexed

	// Writes: the latency of one acknowledged batch, and the documents a
	// second over all batches, of the one engine and of the cluster.
	One, Cluster Writes

	Queries  int      // queries per search mode
	Searches []Search // bm25, dense, hybrid (bm25+dense), then late and hybrid (bm25+dense+late) with Late
}

// Writes is what one side's writes measured.
type Writes struct {
	P50, P95 time.Duration // a batch's latency
	Rate     float64       // documents a second
}

// Search is one search mode's latency on the one engine and on the
// cluster.
type Search struct {
	Name                                   string
	OneP50, OneP95, ClusterP50, ClusterP95 time.Duration
}

// Run indexes the documents in the one engine and in the cluster, batch
// by batch in turn, then searches both, query by query in turn.
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Data == "" || c.Batch <= 0 || c.Queries <= 0 {
		return nil, errors.New("bench cluster: Data, Batch and Queries are required")
	}
	log := c.Log
	if log == nil {
		log = io.Discard
	}
	model := c.Model
	corpus, err := readBEIRDocs(filepath.Join(c.Data, "corpus.jsonl"), c.Docs)
	if err != nil {
		return nil, err
	}
	qf, err := os.Open(filepath.Join(c.Data, "queries.jsonl"))
	if err != nil {
		return nil, err
	}
	qs, err := evaluate.ReadQueries(qf)
	qf.Close()
	if err != nil {
		return nil, err
	}
	qs = qs[:min(len(qs), c.Queries)]
	root := c.Dir
	if root == "" {
		if root, err = os.MkdirTemp("", "tandem-bench-cluster-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(root)
	}
	schema := &tandem.Schema{Strict: true, Fields: []tandem.Field{{Name: "title", Type: tandem.Text}, {Name: "text", Type: tandem.Text}}}
	eo := engine.Options{Schema: schema, Dense: []string{model}}
	if c.Late {
		eo.Late = []string{model}
	}
	single, err := engine.Open(filepath.Join(root, "single"), &eo)
	if err != nil {
		return nil, err
	}
	defer single.Close()

	// Encode once: both sides get the vectors.
	start := time.Now()
	var prepared []tandem.Doc
	for i := 0; i < len(corpus); i += 64 {
		p, err := single.Shard().Prepare(ctx, corpus[i:min(i+64, len(corpus))])
		if err != nil {
			return nil, err
		}
		for _, pd := range p {
			d := pd.Doc
			if d.Vectors, err = vectorsOf(pd, model, c.Late); err != nil {
				return nil, err
			}
			prepared = append(prepared, d)
		}
		progress(log, "encode", len(prepared), len(corpus), start)
	}
	fmt.Fprintln(log)

	nodes, err := startLocalCluster(root, 3, engine.Options{})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	spec := tandemcluster.CollectionSpec{Name: "bench", Shards: 3, Replicas: 3, Schema: schema, Dense: eo.Dense, Late: eo.Late}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = nodes[0].CreateCollection(cctx, spec)
	cancel()
	if err != nil {
		return nil, err
	}

	// Writes, alternating batch by batch.
	var oneLat, clLat []time.Duration
	var oneTotal, clTotal time.Duration
	start = time.Now()
	for i, b := 0, 0; i < len(prepared); i, b = i+c.Batch, b+1 {
		part := prepared[i:min(i+c.Batch, len(prepared))]
		t := time.Now()
		if _, err := single.Index(ctx, part); err != nil {
			return nil, err
		}
		d := time.Since(t)
		oneLat, oneTotal = append(oneLat, d), oneTotal+d
		t = time.Now()
		if _, err := nodes[b%3].Index(ctx, "bench", part); err != nil {
			return nil, err
		}
		d = time.Since(t)
		clLat, clTotal = append(clLat, d), clTotal+d
		progress(log, "write", i+len(part), len(prepared), start)
	}
	fmt.Fprintln(log)
	r := &Report{Docs: len(prepared), Batch: c.Batch, Model: model, Late: c.Late, Queries: len(qs),
		One:     Writes{P50: bench.Percentile(oneLat, 0.5), P95: bench.Percentile(oneLat, 0.95), Rate: float64(len(prepared)) / oneTotal.Seconds()},
		Cluster: Writes{P50: bench.Percentile(clLat, 0.5), P95: bench.Percentile(clLat, 0.95), Rate: float64(len(prepared)) / clTotal.Seconds()}}

	// Searches, alternating query by query, each side encoding its query.
	modes := [][]string{{"bm25"}, {"dense"}, {"bm25", "dense"}}
	names := []string{"bm25", "dense", "hybrid (bm25+dense)"}
	if c.Late {
		modes = append(modes, []string{"late"}, []string{"bm25", "dense", "late"})
		names = append(names, "late", "hybrid (bm25+dense+late)")
	}
	for m, rets := range modes {
		var one, cl []time.Duration
		for i, q := range qs {
			req := engine.Request{Text: q.Text, Retrievers: rets, K: 10}
			t := time.Now()
			if _, err := single.Search(ctx, req); err != nil {
				return nil, err
			}
			one = append(one, time.Since(t))
			t = time.Now()
			if _, err := nodes[i%3].Search(ctx, "bench", req, nil); err != nil {
				return nil, err
			}
			cl = append(cl, time.Since(t))
		}
		r.Searches = append(r.Searches, Search{Name: names[m], OneP50: bench.Percentile(one, 0.5), OneP95: bench.Percentile(one, 0.95),
			ClusterP50: bench.Percentile(cl, 0.5), ClusterP95: bench.Percentile(cl, 0.95)})
	}
	return r, nil
}

// WriteMarkdown writes the report: a line that says what ran, then two
// Markdown tables, writes and searches.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "\n%d documents in batches of %d, alternating; 3 nodes in one process on loopback, 3 shards x 3 replicas; retrievers bm25 + dense:%s", r.Docs, r.Batch, r.Model)
	if r.Late {
		fmt.Fprintf(w, " + late:%s", r.Model)
	}
	fmt.Fprintf(w, "\n\n| writes | one node | cluster | cluster/one |\n|---|---|---|---|\n")
	fmt.Fprintf(w, "| batch p50 | %.1f ms | %.1f ms | %.2fx |\n", ms(r.One.P50), ms(r.Cluster.P50), ms(r.Cluster.P50)/ms(r.One.P50))
	fmt.Fprintf(w, "| batch p95 | %.1f ms | %.1f ms | %.2fx |\n", ms(r.One.P95), ms(r.Cluster.P95), ms(r.Cluster.P95)/ms(r.One.P95))
	fmt.Fprintf(w, "| documents/s | %.0f | %.0f | %.2fx |\n", r.One.Rate, r.Cluster.Rate, r.Cluster.Rate/r.One.Rate)
	fmt.Fprintf(w, "\n| search, %d queries | one node p50 | p95 | cluster p50 | p95 | p50 cluster/one |\n|---|---|---|---|---|---|\n", r.Queries)
	for _, s := range r.Searches {
		fmt.Fprintf(w, "| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.2fx |\n", s.Name,
			ms(s.OneP50), ms(s.OneP95), ms(s.ClusterP50), ms(s.ClusterP95), ms(s.ClusterP50)/ms(s.OneP50))
	}
}

// ms is d in milliseconds, to the nanosecond.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// progress prints a progress line: done of total, rate and time left.
func progress(w io.Writer, what string, done, total int, start time.Time) {
	rate := float64(done) / time.Since(start).Seconds()
	left := time.Duration(float64(total-done) / rate * float64(time.Second))
	fmt.Fprintf(w, "\r%s: %d/%d documents, %.0f/s, %v left   ", what, done, total, rate, left.Round(time.Second))
}

// vectorsOf turns a prepared document's blobs back into vectors.
func vectorsOf(p engine.Prepared, model string, late bool) (map[string]tandem.Vectors, error) {
	v, err := engine.BlobVectors(p.Blobs, model)
	if err != nil {
		return nil, err
	}
	if !late {
		v.Tokens = nil
	}
	return map[string]tandem.Vectors{model: v}, nil
}

// readBEIRDocs reads up to n documents (all when n is 0) of a BEIR
// corpus: _id, title and text.
func readBEIRDocs(path string, n int) ([]tandem.Doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []tandem.Doc
	for line := 1; sc.Scan() && (n == 0 || len(out) < n); line++ {
		var r struct {
			ID    string `json:"_id"`
			Title string `json:"title"`
			Text  string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, line, err)
		}
		if strings.TrimSpace(r.Title+r.Text) == "" {
			continue
		}
		out = append(out, tandem.Doc{ID: r.ID, Fields: map[string]any{"title": r.Title, "text": r.Text}})
	}
	return out, sc.Err()
}

// startLocalCluster starts n nodes in this process on loopback ports.
func startLocalCluster(root string, n int, eo engine.Options) ([]*tandemcluster.Node, error) {
	var peers []tandemcluster.Peer
	var rls, hls []net.Listener
	for i := range n {
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		hl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		rls, hls = append(rls, rl), append(hls, hl)
		peers = append(peers, tandemcluster.Peer{ID: fmt.Sprint("n", i), Raft: rl.Addr().String(), HTTP: hl.Addr().String()})
	}
	var nodes []*tandemcluster.Node
	for i := range n {
		nd, err := tandemcluster.Start(tandemcluster.Config{ID: peers[i].ID, Dir: filepath.Join(root, peers[i].ID), Peers: peers,
			RaftListener: rls[i], HTTPListener: hls[i], Engine: eo})
		if err != nil {
			for _, x := range nodes {
				x.Close()
			}
			return nil, err
		}
		nodes = append(nodes, nd)
	}
	return nodes, nil
}
