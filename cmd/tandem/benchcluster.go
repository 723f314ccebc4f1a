package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/cluster"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/evaluate"
)

// runBenchCluster measures a 3-node cluster (3 shards x 3 replicas, nodes
// in this process on loopback) against one engine, on the same documents
// and queries, alternating between the two: the added latency of an
// acknowledged batch and the write throughput, then search latency per
// mode. Documents are encoded once, before either is timed, and both
// are given the vectors, so that the writes measure replication, not
// encoding.
func runBenchCluster(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench cluster", stderr)
	data := fset.String("data", "", "BEIR directory (corpus.jsonl, queries.jsonl), e.g. ../shared/data/scifact")
	docs := fset.Int("docs", 0, "documents to index (default all)")
	batch := fset.Int("batch", 64, "documents per acknowledged batch")
	queries := fset.Int("queries", 300, "queries per search mode")
	model := fset.String("model", encoder.DefaultModel, "dense model")
	late := fset.Bool("late", false, "index late interaction too (three more copies of every token matrix in memory)")
	dir := fset.String("dir", "", "working directory (default a temporary one, removed afterwards)")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	if *data == "" || *batch <= 0 || *queries <= 0 || fset.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: tandem bench cluster --data BEIR_DIR [--docs N] [--batch 64] [--queries 300] [--late]")
		return errUsage
	}
	corpus, err := readBEIRDocs(filepath.Join(*data, "corpus.jsonl"), *docs)
	if err != nil {
		return err
	}
	qf, err := os.Open(filepath.Join(*data, "queries.jsonl"))
	if err != nil {
		return err
	}
	qs, err := evaluate.ReadQueries(qf)
	qf.Close()
	if err != nil {
		return err
	}
	qs = qs[:min(len(qs), *queries)]
	root := *dir
	if root == "" {
		if root, err = os.MkdirTemp("", "tandem-bench-cluster-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	schema := &tandem.Schema{Strict: true, Fields: []tandem.Field{{Name: "title", Type: tandem.Text}, {Name: "text", Type: tandem.Text}}}
	eo := engine.Options{Schema: schema, Dense: []string{*model}}
	if *late {
		eo.Late = []string{*model}
	}
	single, err := engine.Open(filepath.Join(root, "single"), &eo)
	if err != nil {
		return err
	}
	defer single.Close()

	// Encode once: both sides get the vectors.
	ctx := context.Background()
	start := time.Now()
	var prepared []tandem.Doc
	for i := 0; i < len(corpus); i += 64 {
		p, err := single.Shard().Prepare(ctx, corpus[i:min(i+64, len(corpus))])
		if err != nil {
			return err
		}
		for _, pd := range p {
			d := pd.Doc
			if d.Vectors, err = vectorsOf(pd, *model, *late); err != nil {
				return err
			}
			prepared = append(prepared, d)
		}
		progress(stderr, "encode", len(prepared), len(corpus), start)
	}
	fmt.Fprintln(stderr)

	nodes, err := startLocalCluster(root, 3, engine.Options{})
	if err != nil {
		return err
	}
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	spec := cluster.CollectionSpec{Name: "bench", Shards: 3, Replicas: 3, Schema: schema, Dense: eo.Dense, Late: eo.Late}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = nodes[0].CreateCollection(cctx, spec)
	cancel()
	if err != nil {
		return err
	}

	// Writes, alternating batch by batch.
	var oneLat, clLat []time.Duration
	var oneTotal, clTotal time.Duration
	start = time.Now()
	for i, b := 0, 0; i < len(prepared); i, b = i+*batch, b+1 {
		part := prepared[i:min(i+*batch, len(prepared))]
		t := time.Now()
		if _, err := single.Index(ctx, part); err != nil {
			return err
		}
		d := time.Since(t)
		oneLat, oneTotal = append(oneLat, d), oneTotal+d
		t = time.Now()
		if _, err := nodes[b%3].Index(ctx, "bench", part); err != nil {
			return err
		}
		d = time.Since(t)
		clLat, clTotal = append(clLat, d), clTotal+d
		progress(stderr, "write", i+len(part), len(prepared), start)
	}
	fmt.Fprintln(stderr)
	fmt.Fprintf(stdout, "\n%d documents in batches of %d, alternating; 3 nodes in one process on loopback, 3 shards x 3 replicas; retrievers bm25 + dense:%s", len(prepared), *batch, *model)
	if *late {
		fmt.Fprintf(stdout, " + late:%s", *model)
	}
	fmt.Fprintf(stdout, "\n\n| writes | one node | cluster | cluster/one |\n|---|---|---|---|\n")
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(stdout, "| batch p50 | %.1f ms | %.1f ms | %.2fx |\n", ms(percentile(oneLat, 0.5)), ms(percentile(clLat, 0.5)), ms(percentile(clLat, 0.5))/ms(percentile(oneLat, 0.5)))
	fmt.Fprintf(stdout, "| batch p95 | %.1f ms | %.1f ms | %.2fx |\n", ms(percentile(oneLat, 0.95)), ms(percentile(clLat, 0.95)), ms(percentile(clLat, 0.95))/ms(percentile(oneLat, 0.95)))
	oneRate, clRate := float64(len(prepared))/oneTotal.Seconds(), float64(len(prepared))/clTotal.Seconds()
	fmt.Fprintf(stdout, "| documents/s | %.0f | %.0f | %.2fx |\n", oneRate, clRate, clRate/oneRate)

	// Searches, alternating query by query, each side encoding its query.
	modes := [][]string{{"bm25"}, {"dense"}, {"bm25", "dense"}}
	names := []string{"bm25", "dense", "hybrid (bm25+dense)"}
	if *late {
		modes = append(modes, []string{"late"}, []string{"bm25", "dense", "late"})
		names = append(names, "late", "hybrid (bm25+dense+late)")
	}
	fmt.Fprintf(stdout, "\n| search, %d queries | one node p50 | p95 | cluster p50 | p95 | p50 cluster/one |\n|---|---|---|---|---|---|\n", len(qs))
	for m, rets := range modes {
		var one, cl []time.Duration
		for i, q := range qs {
			req := engine.Request{Text: q.Text, Retrievers: rets, K: 10}
			t := time.Now()
			if _, err := single.Search(ctx, req); err != nil {
				return err
			}
			one = append(one, time.Since(t))
			t = time.Now()
			if _, err := nodes[i%3].Search(ctx, "bench", req, nil); err != nil {
				return err
			}
			cl = append(cl, time.Since(t))
		}
		fmt.Fprintf(stdout, "| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.2fx |\n", names[m],
			ms(percentile(one, 0.5)), ms(percentile(one, 0.95)), ms(percentile(cl, 0.5)), ms(percentile(cl, 0.95)), ms(percentile(cl, 0.5))/ms(percentile(one, 0.5)))
	}
	return nil
}

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
func startLocalCluster(root string, n int, eo engine.Options) ([]*cluster.Node, error) {
	var peers []cluster.Peer
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
		peers = append(peers, cluster.Peer{ID: fmt.Sprint("n", i), Raft: rl.Addr().String(), HTTP: hl.Addr().String()})
	}
	var nodes []*cluster.Node
	for i := range n {
		nd, err := cluster.Start(cluster.Config{ID: peers[i].ID, Dir: filepath.Join(root, peers[i].ID), Peers: peers,
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
