package engine

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
)

// TestQueryEncodingSameRanking checks that a search ranks the same whether
// its query encoding came from a run of its own, from a run shared with
// other searches' queries, or from the query cache: SciFact's first 150
// documents indexed with the default model for dense and late retrieval,
// then its 300 test queries searched dense and late three times, with
// identical ids and scores required each time:
//   - with the cache off and one searcher: each query in a run of its own;
//   - with the defaults and 8 searchers at once: batched runs;
//   - with the same engine again, one searcher: every encoding cached.
func TestQueryEncodingSameRanking(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: encodes 150 SciFact documents and 600 queries")
	}
	data := beirDir(t, "scifact")
	needModel(t)
	dir := t.TempDir()
	opts := func(o Options) *Options {
		o.Dense, o.Late, o.NoSync = []string{encoder.DefaultModel}, []string{encoder.DefaultModel}, true
		return &o
	}
	e, err := Open(dir, opts(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(data, "corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var docs []tandem.Doc
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() && len(docs) < 150 {
		d, err := tandem.DecodeJSON(sc.Bytes(), "_id")
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
	f.Close()
	if _, err := e.Index(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	queries, qrels := beirTest(t, data)
	var texts []string
	for _, q := range queries {
		if _, ok := qrels[q.ID]; ok {
			texts = append(texts, q.Text)
		}
	}
	if len(texts) != 300 {
		t.Fatalf("SciFact has %d test queries, want 300", len(texts))
	}
	retrievers := []string{"dense:" + encoder.DefaultModel, "late:" + encoder.DefaultModel}

	// rank searches every text with each retriever from searchers
	// goroutines and returns the rankings, "id score" per hit.
	rank := func(e *Engine, searchers int) [][]string {
		out := make([][]string, len(texts)*len(retrievers))
		var next atomic.Int64
		var wg sync.WaitGroup
		for range searchers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(out); i = int(next.Add(1) - 1) {
					res, err := e.Search(context.Background(), Request{Text: texts[i/2], Retrievers: retrievers[i%2 : i%2+1], K: 20, IDsOnly: true})
					if err != nil {
						t.Error(err)
						return
					}
					for _, h := range res.Hits {
						out[i] = append(out[i], fmt.Sprintf("%s %v", h.ID, h.Score))
					}
				}
			})
		}
		wg.Wait()
		return out
	}
	same := func(how string, got, want [][]string) {
		t.Helper()
		bad := 0
		for i := range want {
			if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
				if bad++; bad <= 3 {
					t.Errorf("%s: %s %q ranks\n%v\nalone it ranks\n%v", how, retrievers[i%2], texts[i/2], got[i], want[i])
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d rankings differ", how, bad, len(want))
		}
	}
	queryStats := func(e *Engine) QueryEncodingStats {
		st, err := e.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if len(st.QueryEncoding) != 1 || st.QueryEncoding[0].Model != encoder.DefaultModel {
			t.Fatalf("query encoding stats %+v, want one for %s", st.QueryEncoding, encoder.DefaultModel)
		}
		return st.QueryEncoding[0]
	}

	alone, err := Open(dir, opts(Options{QueryCacheBytes: -1, QueryBatch: 1}))
	if err != nil {
		t.Fatal(err)
	}
	want := rank(alone, 1)
	if s := queryStats(alone); s.Runs != int64(len(want)) || s.Queries != s.Runs || s.CacheCapacityBytes != 0 {
		t.Errorf("alone, no cache: %+v, want %d runs of one query", s, len(want))
	}
	if err := alone.Close(); err != nil {
		t.Fatal(err)
	}

	e, err = Open(dir, opts(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	same("8 searchers, batched runs", rank(e, 8), want)
	s := queryStats(e)
	t.Logf("8 searchers: %d queries in %d runs, cache %+v", s.Queries, s.Runs, s)
	if s.Runs >= s.Queries || s.CacheCapacityBytes != encoder.DefaultQueryCacheBytes {
		t.Errorf("8 searchers: %d queries in %d runs (none shared?), cache capacity %d", s.Queries, s.Runs, s.CacheCapacityBytes)
	}
	same("from the cache", rank(e, 1), want)
	if s2 := queryStats(e); s2.Runs != s.Runs || s2.CacheHits-s.CacheHits != int64(len(want)) {
		t.Errorf("the cached pass: %+v after %+v, want %d more hits and no run", s2, s, len(want))
	}
}
