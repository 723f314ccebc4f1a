package cluster

import (
	"math"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// TestEquivalenceResidual: with the default late-interaction index
// (residual codes) each shard trains its own centroids, so a cluster
// cannot promise one node's exact ranking; what it promises is that every
// late-interaction hit carries its exact score, so a document both return
// scores the same, and that the cluster finds nearly the same first ten.
// A collection on one node and on 3 shards (1 replica, searches over
// HTTP) holding the same documents are compared, late interaction alone
// and hybrid, with and without filters: recall@10 against one node is
// logged and must be at least 0.9 on average, and common late hits must
// score alike to 1e-6.
func TestEquivalenceResidual(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: encodes a collection and indexes it twice")
	}
	ctx := testtime.Context(t)
	single, err := engine.Open(t.TempDir(), &engine.Options{Schema: testSchema(), Dense: []string{encoder.DefaultModel},
		Late: []string{encoder.DefaultModel}, NoSync: true, EncoderThreads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	if s, err := single.Stats(); err != nil || len(s.Late) != 1 {
		t.Fatalf("stats %+v, %v", s, err)
	}
	docs, queries := encodedCorpus(t, single)
	queries = queries[:min(len(queries), 8)]
	for i := 0; i < len(docs); i += 100 {
		if _, err := single.Index(ctx, docs[i:min(i+100, len(docs))]); err != nil {
			t.Fatal(err)
		}
	}
	s, err := single.Stats()
	if err != nil || len(s.Late) != 1 || s.Late[0].Centroids == 0 {
		t.Fatalf("one node: late stats %+v, %v: want residual codes, the default", s.Late, err)
	}

	nodes := testCluster(t, 3, engine.Options{NoSync: true, EncoderThreads: 2})
	const name = "res"
	spec := CollectionSpec{Name: name, Shards: 3, Replicas: 1, Schema: testSchema(),
		Dense: []string{encoder.DefaultModel}, Late: []string{encoder.DefaultModel}}
	if err := nodes[0].CreateCollection(ctx, spec); err != nil {
		t.Fatal(err)
	}
	pos := Position{}
	for i := 0; i < len(docs); i += 100 {
		r, err := nodes[(i/100)%3].Index(ctx, name, docs[i:min(i+100, len(docs))])
		if err != nil {
			t.Fatal(err)
		}
		pos.Merge(r.Position)
	}

	filters := []string{"", `{"term":{"group":"red"}}`, `{"range":{"year":{"gte":1985}}}`}
	for _, mode := range [][]string{{"late"}, {"bm25", "dense", "late"}} {
		var recall float64
		var n int
		for qi, q := range queries {
			for fi, f := range filters {
				req, _, err := single.Shard().EncodeQuery(ctx, engine.Request{Text: q, Retrievers: mode, K: 10, Filter: []byte(f)})
				if err != nil {
					t.Fatal(err)
				}
				want, err := single.Search(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := nodes[(qi+fi)%3].Search(ctx, name, req, &SearchOptions{MinPosition: pos})
				if err != nil {
					t.Fatal(err)
				}
				if len(want.Hits) == 0 {
					continue
				}
				byID := map[string]tandem.Hit{}
				for _, h := range got.Hits {
					byID[h.ID] = h
				}
				found := 0
				for _, w := range want.Hits {
					g, ok := byID[w.ID]
					if !ok {
						continue
					}
					found++
					if len(mode) == 1 && math.Abs(g.Score-w.Score) > 1e-6 {
						t.Errorf("query %d filter %q: %s scores %v on the cluster, %v on one node", qi, f, w.ID, g.Score, w.Score)
					}
				}
				recall += float64(found) / float64(len(want.Hits))
				n++
			}
		}
		if n == 0 {
			t.Fatalf("%v: no search had hits to compare", mode)
		}
		t.Logf("%v: recall@10 against one node %.4f over %d searches", mode, recall/float64(n), n)
		if recall/float64(n) < 0.9 {
			t.Errorf("%v: recall@10 against one node %.4f, want at least 0.9", mode, recall/float64(n))
		}
	}
}
