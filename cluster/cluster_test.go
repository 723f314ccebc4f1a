package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/fusion"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// testCluster starts n nodes in this process, each with its own Raft and
// HTTP listeners on loopback.
func testCluster(t *testing.T, n int, eopts engine.Options) []*Node {
	t.Helper()
	return testClusterWith(t, make([]Credentials, n), eopts)
}

// testClusterWith starts a node per credentials in this process, node i
// holding creds[i].
func testClusterWith(t *testing.T, creds []Credentials, eopts engine.Options) []*Node {
	t.Helper()
	return testClusterConfig(t, creds, eopts, nil)
}

// testClusterConfig is testClusterWith, with set (when not nil) adjusting
// node i's configuration before it starts.
func testClusterConfig(t *testing.T, creds []Credentials, eopts engine.Options, set func(i int, cfg *Config)) []*Node {
	t.Helper()
	n := len(creds)
	var peers []Peer
	var rls, hls []net.Listener
	for i := range n {
		rl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rls, hls = append(rls, rl), append(hls, hl)
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i), Raft: rl.Addr().String(), HTTP: hl.Addr().String()})
	}
	root := t.TempDir()
	var nodes []*Node
	for i := range n {
		cfg := testRaft(Config{ID: peers[i].ID, Dir: filepath.Join(root, peers[i].ID), Peers: peers,
			RaftListener: rls[i], HTTPListener: hls[i], Engine: eopts, Log: testLog{t}, Credentials: creds[i]})
		if set != nil {
			set(i, &cfg)
		}
		nd, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, nd)
		t.Cleanup(func() { nd.Close() })
	}
	return nodes
}

// testRaft gives cfg Raft's default timeouts (Config, 500 ms), stretched
// by the test time scale (internal/testtime): a starved node on a slow or
// busy machine misses heartbeats as late as its scale allows before its
// group holds an election. Every node a test starts goes through it.
func testRaft(cfg Config) Config {
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = testtime.D(500*time.Millisecond), testtime.D(500*time.Millisecond)
	return cfg
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// corpus is Cranfield from ../shared/data when it is there (the first
// limit documents), else generated documents; each gets a keyword and a
// number field for filters.
func corpus(t *testing.T, limit int) (docs []tandem.Doc, queries []string) {
	dir := filepath.Join("..", "..", "shared", "data", "cranfield")
	f, err := os.Open(filepath.Join(dir, "corpus.jsonl"))
	if err != nil {
		t.Logf("Cranfield is absent (%v): using generated documents", err)
		topics := []string{"volcanoes erupt lava and ash", "bees make honey in hives", "trains run on steel rails",
			"glaciers carve valleys slowly", "violins have four strings", "bread rises with yeast",
			"comets have icy tails", "owls hunt at night", "tides follow the moon", "coral reefs shelter fish"}
		for i := range limit {
			tp := topics[i%len(topics)]
			docs = append(docs, tandem.Doc{ID: fmt.Sprint("g", i), Fields: map[string]any{
				"title": fmt.Sprintf("Note %d on %s", i, strings.Fields(tp)[0]),
				"text":  fmt.Sprintf("%s; note %d says %s again, and %s.", tp, i, strings.Fields(tp)[1], topics[(i*7)%len(topics)])}})
		}
		queries = append(queries, topics...)
	} else {
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() && len(docs) < limit {
			var r struct{ ID, Title, Text string }
			var raw map[string]string
			if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
				t.Fatal(err)
			}
			r.ID, r.Title, r.Text = raw["_id"], raw["title"], raw["text"]
			if strings.TrimSpace(r.Title+r.Text) == "" {
				continue
			}
			docs = append(docs, tandem.Doc{ID: r.ID, Fields: map[string]any{"title": r.Title, "text": r.Text}})
		}
		qf, err := os.ReadFile(filepath.Join(dir, "queries.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(qf)), "\n") {
			var q map[string]string
			if err := json.Unmarshal([]byte(line), &q); err != nil {
				t.Fatal(err)
			}
			queries = append(queries, q["text"])
		}
	}
	for i := range docs {
		docs[i].Fields["group"] = []string{"red", "green", "blue"}[i%3]
		docs[i].Fields["year"] = float64(1950 + i%40)
	}
	return docs, queries
}

func testSchema() *tandem.Schema {
	s := &tandem.Schema{Strict: true, Fields: []tandem.Field{
		{Name: "title", Type: tandem.Text}, {Name: "text", Type: tandem.Text},
		{Name: "group", Type: tandem.Keyword}, {Name: "year", Type: tandem.Number}}}
	s.Fill()
	return s
}

// withVectors returns docs carrying the vectors e computes for them, so
// that every collection they go into stores the same ones.
func withVectors(t *testing.T, e *engine.Engine, docs []tandem.Doc) []tandem.Doc {
	t.Helper()
	ctx := context.Background()
	var out []tandem.Doc
	for i := 0; i < len(docs); i += 64 {
		p, err := e.Shard().Prepare(ctx, docs[i:min(i+64, len(docs))])
		if err != nil {
			t.Fatal(err)
		}
		for _, pd := range p {
			d := pd.Doc
			m := encoder.DefaultModel
			v, err := engine.BlobVectors(pd.Blobs, m)
			if err != nil {
				t.Fatal(err)
			}
			d.Vectors = map[string]tandem.Vectors{m: v}
			out = append(out, d)
		}
	}
	return out
}

// encoded is the corpus's first encodedDocs documents with their
// vectors, and its queries, computed once per test binary by the first
// test that asks (encodedCorpus): encoding them is the costliest step of
// TestEquivalence and TestEquivalenceResidual, which use the same ones.
var encoded struct {
	sync.Mutex
	docs    []tandem.Doc
	queries []string
}

const encodedDocs = 400

// encodedCorpus returns corpus(t, encodedDocs) with the vectors its
// model computes for each document: e's, the first time (every engine
// with encoder.DefaultModel computes the same).
func encodedCorpus(t *testing.T, e *engine.Engine) ([]tandem.Doc, []string) {
	t.Helper()
	encoded.Lock()
	defer encoded.Unlock()
	if encoded.docs == nil {
		docs, queries := corpus(t, encodedDocs)
		encoded.docs, encoded.queries = withVectors(t, e, docs), queries
	}
	return slices.Clone(encoded.docs), slices.Clone(encoded.queries)
}

// TestEquivalence indexes the same documents, with the same vectors, into
// one engine and into a 3-node cluster as 3 shards, once with 3 replicas
// (every node holds every shard: searches read local replicas) and once
// with 1 (each node holds one shard: searches go over HTTP), then checks
// that every mode and fusion method, with and without filters, ranks
// alike: the same hits in the same order (documents tied at equal scores
// may swap), scores and each retriever's part equal to 1e-6; and that
// every search's facets (values, ranges and a histogram, disjunctive or
// not, over the filter scope or the results scope) count alike.
func TestEquivalence(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: encodes and indexes a collection four times")
	}
	ctx := testtime.Context(t)
	eopts := engine.Options{NoSync: true, EncoderThreads: 2}
	single, err := engine.Open(t.TempDir(), &engine.Options{Schema: testSchema(), Dense: []string{encoder.DefaultModel},
		Late: []string{encoder.DefaultModel}, LateIndex: "Flat", NoSync: true, EncoderThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	docs, queries := encodedCorpus(t, single)
	queries = queries[:min(len(queries), 8)]
	// Updates and deletes after the first pass, so that indexes hold dead
	// documents and statistics move.
	updated := make([]tandem.Doc, 0, 40)
	for i := 0; i < 40; i++ {
		d := docs[i*7]
		d.Fields = map[string]any{"title": d.Fields["title"], "text": d.Fields["text"], "group": "red", "year": float64(2001)}
		updated = append(updated, d)
	}
	var deleted []string
	for i := 0; i < 30; i++ {
		deleted = append(deleted, docs[i*11+3].ID)
	}
	write := func(index func([]tandem.Doc) error, del func([]string) error) {
		for i := 0; i < len(docs); i += 100 {
			if err := index(docs[i:min(i+100, len(docs))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := index(updated); err != nil {
			t.Fatal(err)
		}
		if err := del(deleted); err != nil {
			t.Fatal(err)
		}
	}
	write(func(d []tandem.Doc) error { _, err := single.Index(ctx, d); return err },
		func(ids []string) error { _, err := single.Delete(ctx, ids); return err })
	// What one engine answers, once for both collections.
	cases := equivalenceCases(t, ctx, single, queries)

	nodes := testCluster(t, 3, eopts)
	for _, replicas := range []int{3, 1} {
		name := fmt.Sprintf("r%d", replicas)
		spec := CollectionSpec{Name: name, Shards: 3, Replicas: replicas, Schema: testSchema(),
			Dense: []string{encoder.DefaultModel}, Late: []string{encoder.DefaultModel}, LateIndex: "Flat"}
		if err := nodes[0].CreateCollection(ctx, spec); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s created", name)
		pos := Position{}
		// Writes enter at different nodes.
		k := 0
		write(func(d []tandem.Doc) error {
			k++
			r, err := nodes[k%3].Index(ctx, name, d)
			pos.Merge(r.Position)
			return err
		}, func(ids []string) error {
			r, err := nodes[2].Delete(ctx, name, ids)
			pos.Merge(r.Position)
			return err
		})
		t.Logf("%s written: %v", name, pos)
		t.Run(name, func(t *testing.T) {
			checkEquivalent(t, ctx, single, nodes, name, cases, pos)
		})
	}
}

// equivalenceCase is one search TestEquivalence compares, and what one
// engine answers to it.
type equivalenceCase struct {
	qi, fi int // query and filter positions
	req    engine.Request
	want   *engine.Result
}

// equivalenceCases are the searches TestEquivalence compares, each with
// its query encoded by single (a cluster search given an encoded query
// does not encode it again) and single's answer: every query with every
// mode and fusion method, with and without filters, some with highlights,
// all with equivalenceFacets, half over the results scope.
func equivalenceCases(t *testing.T, ctx context.Context, single *engine.Engine, queries []string) []equivalenceCase {
	t.Helper()
	modes := [][]string{{"bm25"}, {"dense"}, {"late"}, {"late-exact"}, {"bm25", "dense"}, {"bm25", "dense", "late"}}
	filters := []string{"", `{"term":{"group":"red"}}`, `{"range":{"year":{"gte":1985}}}`}
	var cases []equivalenceCase
	for qi, q := range queries {
		for _, mode := range modes {
			methods := []string{""}
			if len(mode) > 1 {
				methods = nil
				for _, m := range fusion.Methods() {
					methods = append(methods, m.String())
				}
			}
			for _, method := range methods {
				for fi, f := range filters {
					req := engine.Request{Text: q, Retrievers: mode, Fusion: method, K: 20, Filter: []byte(f), Facets: equivalenceFacets}
					if (qi+fi+len(mode))%2 == 1 {
						req.FacetScope, req.FacetWindow = engine.FacetScopeResults, 30
					}
					if method == "wrrf" {
						req.Weight = map[string]float64{"bm25": 0.5, "dense": 2}
					}
					if (qi+fi)%2 == 0 {
						req.Highlight = &engine.HighlightRequest{}
					}
					req, _, err := single.Shard().EncodeQuery(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					want, err := single.Search(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					cases = append(cases, equivalenceCase{qi: qi, fi: fi, req: req, want: want})
				}
			}
		}
	}
	return cases
}

// checkEquivalent runs each case's search through the cluster's
// collection coll, through node (qi+fi) mod 3, and compares it with one
// engine's answer: ranking, highlights and facets.
func checkEquivalent(t *testing.T, ctx context.Context, single *engine.Engine, nodes []*Node, coll string, cases []equivalenceCase, pos Position) {
	compared := 0
	facetsCompared, facetsTied, highlightsCompared := 0, 0, 0
	for _, c := range cases {
		req, want := c.req, c.want
		what := fmt.Sprintf("query %d %q, %v %s, filter %q", c.qi, req.Text, req.Retrievers, req.Fusion, req.Filter)
		node := nodes[(c.qi+c.fi)%len(nodes)]
		got, err := node.Search(ctx, coll, req, &SearchOptions{MinPosition: pos})
		if err != nil {
			t.Fatalf("%s: %s: %v", node.ID(), what, err)
		}
		if msg := sameRanking(got.Hits, want.Hits); msg != "" {
			t.Errorf("%s: %s", what, msg)
		}
		if req.Highlight != nil {
			highlightsCompared += sameHighlights(t, got.Hits, want.Hits)
		}
		// The results scope counts windows of rankings that may keep
		// different documents tied at their cut: facets that differ
		// there are an error only when the windows hold the same
		// documents (asked only then: it costs a search per window).
		gj, _ := json.Marshal(got.Facets)
		wj, _ := json.Marshal(want.Facets)
		switch {
		case len(want.Facets) == len(req.Facets) && string(gj) == string(wj):
			facetsCompared++
		case req.FacetScope == "" || sameWindows(t, ctx, single, node, coll, req, pos):
			t.Errorf("%s, scope %q: facets\n%s\nwant\n%s", what, req.FacetScope, gj, wj)
			facetsCompared++
		default:
			facetsTied++
		}
		if len(want.Hits) > 0 {
			compared++
		}
	}
	if compared == 0 {
		t.Fatal("no search had hits to compare")
	}
	t.Logf("%d searches compared; facets of %d compared, %d left out for a tie at a window's cut; highlights of %d hits compared", compared, facetsCompared, facetsTied, highlightsCompared)
	if highlightsCompared == 0 {
		t.Error("no hit's highlights were compared")
	}
	if facetsTied > facetsCompared/10 {
		t.Errorf("%d of %d searches' facets left out for ties", facetsTied, facetsTied+facetsCompared)
	}
}

// sameHighlights checks that each hit of got that want holds has the
// same highlights, byte for byte as JSON (late-interaction scores
// included), and returns how many it compared.
func sameHighlights(t *testing.T, got, want []tandem.Hit) int {
	t.Helper()
	byID := map[string]tandem.Hit{}
	for _, h := range want {
		byID[h.ID] = h
	}
	n := 0
	for _, g := range got {
		w, ok := byID[g.ID]
		if !ok {
			continue
		}
		gj, _ := json.Marshal(g.Highlights)
		wj, _ := json.Marshal(w.Highlights)
		if string(gj) != string(wj) {
			t.Errorf("hit %s: highlights\n%s\nwant\n%s", g.ID, gj, wj)
		}
		if w.Highlights != nil {
			n++
		}
	}
	return n
}

// equivalenceFacets are the facets TestEquivalence compares: group
// values and a year histogram, both disjunctive (the filters on group
// and on year drop for them), and year ranges.
var equivalenceFacets = []engine.FacetRequest{
	{Field: "group", Disjunctive: true},
	{Field: "year", Ranges: []engine.FacetRange{{To: 1960.0}, {From: 1960.0, To: 1975.0}, {From: 1975.0}}},
	{Field: "year", Interval: 7, Disjunctive: true},
}

// sameWindows reports whether one engine and a cluster rank the same
// documents into each window req's facets of the results scope count
// (engine.Plan.FacetGroups: the request's own, and one per filter that
// disjunctive facets reduce it to).
func sameWindows(t *testing.T, ctx context.Context, single *engine.Engine, node *Node, coll string, req engine.Request, pos Position) bool {
	t.Helper()
	plan, err := single.Shard().Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := plan.FacetGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		plain := g.Request
		plain.K, plain.Offset, plain.Facets, plain.FacetScope, plain.FacetWindow, plain.IDsOnly = plan.FacetWindow(), 0, nil, "", 0, true
		w, err := single.Search(ctx, plain)
		if err != nil {
			t.Fatal(err)
		}
		got, err := node.Search(ctx, coll, plain, &SearchOptions{MinPosition: pos})
		if err != nil {
			t.Fatal(err)
		}
		set := map[string]bool{}
		for _, h := range w.Hits {
			set[h.ID] = true
		}
		if len(got.Hits) != len(w.Hits) {
			return false
		}
		for _, h := range got.Hits {
			if !set[h.ID] {
				return false
			}
		}
	}
	return true
}

// sameRanking compares two rankings: equal length, scores and each
// retriever's raw score and contribution equal to 1e-6, and the same ids
// in the same order except within a run of tied scores, where they must be
// the same set (unless the run reaches the end of the list, where the cut
// may keep different ones of the tied documents).
func sameRanking(got, want []tandem.Hit) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d hits, want %d (got %s; want %s)", len(got), len(want), ids(got), ids(want))
	}
	const eps = 1e-6
	for i := range want {
		if math.Abs(got[i].Score-want[i].Score) > eps {
			return fmt.Sprintf("hit %d: score %v, want %v (got %s %+v; want %s %+v)", i, got[i].Score, want[i].Score, got[i].ID, got[i].Sources, want[i].ID, want[i].Sources)
		}
	}
	for i := 0; i < len(want); {
		j := i + 1
		for j < len(want) && math.Abs(want[j].Score-want[i].Score) <= eps {
			j++
		}
		if j == len(want) && j-i > 1 {
			break // a tie cut by K
		}
		set := map[string]bool{}
		for _, h := range want[i:j] {
			set[h.ID] = true
		}
		for _, h := range got[i:j] {
			if !set[h.ID] {
				return fmt.Sprintf("hits %d-%d: %s, want %s", i, j-1, ids(got[i:j]), ids(want[i:j]))
			}
		}
		i = j
	}
	byID := map[string]tandem.Hit{}
	for _, h := range got {
		byID[h.ID] = h
	}
	for _, w := range want {
		g, ok := byID[w.ID]
		if !ok {
			continue // a tie cut by K
		}
		if len(g.Sources) != len(w.Sources) {
			return fmt.Sprintf("%s: %d sources, want %d", w.ID, len(g.Sources), len(w.Sources))
		}
		for k := range w.Sources {
			gs, ws := g.Sources[k], w.Sources[k]
			if gs.Retriever != ws.Retriever || math.Abs(gs.Score-ws.Score) > eps || math.Abs(gs.Contribution-ws.Contribution) > eps || (gs.Rank == 0) != (ws.Rank == 0) {
				return fmt.Sprintf("%s: source %d %+v, want %+v", w.ID, k, gs, ws)
			}
		}
	}
	return ""
}

func ids(hs []tandem.Hit) string {
	var b strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%.4f", h.ID, h.Score)
	}
	return b.String()
}

// TestCreateExisting: creating a collection that exists fails with
// ErrExists through every node, the metadata leader or a node that
// forwards to it (a forwarded refusal used to come back as a bare 400);
// a schema that no shard could open is refused before it is replicated.
func TestCreateExisting(t *testing.T) {
	nodes := testCluster(t, 3, engine.Options{})
	ctx := testtime.Context(t)
	if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 1, Replicas: 3, Schema: testSchema()}); err != nil {
		t.Fatal(err)
	}
	forwarded := 0
	for _, n := range nodes {
		err := n.CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 1, Replicas: 3, Schema: testSchema()})
		if !errors.Is(err, ErrExists) || !errors.Is(err, fs.ErrExist) {
			t.Errorf("create an existing collection through %s: %v, want ErrExists", n.ID(), err)
		}
		var re *remoteError
		if errors.As(err, &re) {
			forwarded++
		}
	}
	if forwarded != 2 {
		t.Errorf("%d of the refusals came from another node, want 2 (every node but the metadata leader)", forwarded)
	}
	// A schema no shard could open is refused before it is replicated.
	bad := testSchema()
	bad.Fields[0].Analyzer = "klingon"
	if err := nodes[1].CreateCollection(ctx, CollectionSpec{Name: "k", Shards: 1, Replicas: 3, Schema: bad}); !errors.Is(err, ErrBadCollection) || !strings.Contains(err.Error(), `unknown analyzer "klingon"`) {
		t.Errorf("a schema with an unknown analyzer: %v", err)
	}
	if got := len(nodes[0].Collections()); got != 1 {
		t.Errorf("%d collections after the refused create, want 1", got)
	}
}
