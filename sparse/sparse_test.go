package sparse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

func testIndex(t testing.TB, schema *tandem.Schema, docs ...tandem.Doc) *Index {
	t.Helper()
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	var changes []storage.Change
	for i := range docs {
		changes = append(changes, storage.Change{Seq: uint64(i + 1), Op: storage.OpPut, DocNum: uint64(i), ID: docs[i].ID, Doc: &docs[i]})
	}
	if err := x.Apply(context.Background(), schema, changes); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestBM25PinnedScores pins Bleve v2.6.1's BM25 (the schema's BM25Bleve
// scoring) to hand-computed values on a three-document, one-segment index,
// and textbook BM25 on the same index. The rules (see
// /work/shared/notes/bleve-bm25.md): tf enters as sqrt(tf); k1=1.2,
// b=0.75; the average length is ceil(vocabulary size / doc count); each
// term's score is multiplied by its query weight idf*queryNorm, with
// queryNorm = 1/sqrt(sum of squared idfs of the query terms); and a match
// query multiplies the sum by matched terms / query terms.
func TestBM25PinnedScores(t *testing.T) {
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "text", Type: tandem.Text, Analyzer: "standard"}}, BM25: &tandem.BM25{Scoring: tandem.BM25Bleve}}
	schema.Fill()
	x := testIndex(t, schema,
		tandem.Doc{ID: "a", Fields: map[string]any{"text": "zebra lion"}},
		tandem.Doc{ID: "b", Fields: map[string]any{"text": "zebra zebra zebra tiger"}},
		tandem.Doc{ID: "c", Fields: map[string]any{"text": "lion tiger cat"}},
	)
	// Vocabulary {zebra, lion, tiger, cat}: average length ceil(4/3) = 2.
	// idf(zebra) = ln(1 + 1.5/2.5) = 0.4700036 (df 2 of 3)
	// idf(cat)   = ln(1 + 2.5/1.5) = 0.9808293 (df 1 of 3)
	// tf part: sqrt(tf)*1.2 / (sqrt(tf) + 1.2*(0.25 + 0.75*len/2))
	//   a (tf 1, len 2) 0.5454545; b (tf 3, len 4) 0.5423883; c (tf 1, len 3) 0.4528302
	//
	// "zebra": queryNorm 1/idf, so score = idf * tf part:
	//   a 0.4700036*0.5454545 = 0.2563656; b 0.4700036*0.5423883 = 0.2549246
	// "zebra cat": queryNorm 1/sqrt(0.4700036² + 0.9808293²) = 0.9194455,
	// coord 1/2 (each document matches one of two terms):
	//   c 0.5*0.9808293²*0.9194455*0.4528302 = 0.2002686
	//   a 0.5*0.4700036²*0.9194455*0.5454545 = 0.0553926
	//   b 0.5*0.4700036²*0.9194455*0.5423883 = 0.0550812
	//
	// Textbook (k1 1.2, b 0.75): lengths 2, 4, 3, so avgdl 3;
	// tf·2.2 / (tf + 1.2·(0.25 + 0.75·len/3)):
	//   a (tf 1, len 2) 2.2/1.9 = 1.1578947; b (tf 3, len 4) 6.6/4.5 = 1.4666667;
	//   c (tf 1, len 3) 2.2/2.2 = 1
	// "zebra": b 0.4700036·1.4666667 = 0.6893387; a 0.4700036·1.1578947 = 0.5442147
	// "zebra cat": c 0.9808293·1 = 0.9808293, then b and a as above.
	textbook := schema.Clone()
	textbook.BM25 = nil
	tests := []struct {
		schema *tandem.Schema
		query  string
		want   []Hit
	}{
		{schema, "zebra", []Hit{{0, 0.2563656}, {1, 0.2549246}}},
		{schema, "zebra cat", []Hit{{2, 0.2002686}, {0, 0.0553926}, {1, 0.0550812}}},
		{textbook, "zebra", []Hit{{1, 0.6893387}, {0, 0.5442147}}},
		{textbook, "zebra cat", []Hit{{2, 0.9808293}, {1, 0.6893387}, {0, 0.5442147}}},
	}
	for _, tc := range tests {
		hits, err := x.Search(context.Background(), tc.schema, Query{Text: tc.query, K: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != len(tc.want) {
			t.Fatalf("%q: hits = %+v, want %+v", tc.query, hits, tc.want)
		}
		for i, w := range tc.want {
			// Bleve stores 1/sqrt(length) as a float32: allow 1e-6.
			if hits[i].DocNum != w.DocNum || math.Abs(hits[i].Score-w.Score) > 1e-6 {
				t.Errorf("%q: hit %d = %+v, want %+v", tc.query, i, hits[i], w)
			}
		}
	}
}

func TestFilterOnlyAndFieldBoosts(t *testing.T) {
	schema := &tandem.Schema{Fields: []tandem.Field{
		{Name: "title", Type: tandem.Text},
		{Name: "text", Type: tandem.Text},
		{Name: "year", Type: tandem.Number},
	}}
	schema.Fill()
	x := testIndex(t, schema,
		tandem.Doc{ID: "a", Fields: map[string]any{"title": "apple", "text": "banana", "year": 2000.0}},
		tandem.Doc{ID: "b", Fields: map[string]any{"title": "banana", "text": "apple", "year": 2010.0}},
	)
	ctx := context.Background()
	// Boosting title puts the title match first, whichever field order.
	for _, field := range []string{"title", "text"} {
		hits, err := x.Search(ctx, schema, Query{Text: "apple", Fields: map[string]float64{"title": 1, "text": 1, field: 5}, K: 2})
		if err != nil {
			t.Fatal(err)
		}
		wantFirst := map[string]uint64{"title": 0, "text": 1}[field]
		if len(hits) != 2 || hits[0].DocNum != wantFirst {
			t.Errorf("boost %s: hits %+v, want docnum %d first", field, hits, wantFirst)
		}
	}
	e, _ := filter.Parse([]byte(`{"range":{"year":{"gt":2005}}}`))
	if err := filter.Check(e, schema); err != nil {
		t.Fatal(err)
	}
	bm, err := x.FilterBitmap(ctx, schema, e)
	if err != nil || bm.GetCardinality() != 1 || !bm.Contains(1) {
		t.Errorf("bitmap = %v, %v; want {1}", bm, err)
	}
	if _, err := x.Search(ctx, schema, Query{Text: "apple", Fields: map[string]float64{"year": 1}, K: 2}); err == nil {
		t.Error("searching a number field: no error")
	}
}

func TestApplySkipsOldAndPersistsSeq(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bleve")
	schema := tandem.DefaultSchema()
	schema.Fill()
	x, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := tandem.Doc{ID: "a", Fields: map[string]any{"text": "hello"}}
	ctx := context.Background()
	if err := x.Apply(ctx, schema, []storage.Change{{Seq: 5, Op: storage.OpPut, DocNum: 1, ID: "a", Doc: &d}}); err != nil {
		t.Fatal(err)
	}
	// A replayed older delete is ignored.
	if err := x.Apply(ctx, schema, []storage.Change{{Seq: 4, Op: storage.OpDelete, DocNum: 1, ID: "a"}}); err != nil {
		t.Fatal(err)
	}
	x.Close()
	x, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.AppliedSeq() != 5 {
		t.Errorf("applied seq after reopen = %d, want 5", x.AppliedSeq())
	}
	if n, _ := x.DocCount(); n != 1 {
		t.Errorf("doc count = %d, want 1", n)
	}
	// Many batches, which Bleve writes in the background: Close waits
	// for all of them.
	for i := range 60 {
		d := tandem.Doc{ID: fmt.Sprint("b", i), Fields: map[string]any{"text": fmt.Sprint("word", i)}}
		if err := x.Apply(ctx, schema, []storage.Change{{Seq: uint64(6 + i), Op: storage.OpPut, DocNum: uint64(2 + i), ID: d.ID, Doc: &d}}); err != nil {
			t.Fatal(err)
		}
	}
	x.Close()
	x, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if n, _ := x.DocCount(); x.AppliedSeq() != 65 || n != 61 {
		t.Errorf("after 60 more batches and reopen: applied %d, %d documents; want 65, 61", x.AppliedSeq(), n)
	}
}

// countdown is a context whose Err reports Canceled from its n-th call on
// (never when n is 0) and counts the calls. Done never closes, so only
// the checks that call Err (Compile's, the guarded clauses', the BM25
// scorer's) see it; Bleve's collector, which selects on Done, does not.
type countdown struct {
	context.Context
	n     int64
	calls atomic.Int64
}

func (c *countdown) Err() error {
	if k := c.calls.Add(1); c.n > 0 && k >= c.n {
		return context.Canceled
	}
	return nil
}

// A filter's work stops when its context is done, at any of its checks:
// while the filter compiles, while Bleve builds its clauses' searchers,
// and while those searchers move through postings that match nothing,
// where Bleve's collector never looks. A bitmap, computed on the
// postings, looks at each clause in each segment, and every
// prefixCheckEvery terms of a range.
func TestFilterHonoursContext(t *testing.T) {
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "text", Type: tandem.Text}, {Name: "kw", Type: tandem.Keyword}, {Name: "n", Type: tandem.Number}}}
	schema.Fill()
	const n = 10_000
	docs := make([]tandem.Doc, n)
	for i := range docs {
		docs[i] = tandem.Doc{ID: fmt.Sprint("d", i), Fields: map[string]any{"text": "common word", "kw": fmt.Sprintf("k%05d", i), "n": float64(i)}}
	}
	x := testIndex(t, schema, docs...)
	// Each matches nothing, after walking every document's postings:
	// Bleve's own searchers, which never look at the context.
	parse := func(s string) filter.Expr {
		e, err := filter.Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		if err := filter.Check(e, schema); err != nil {
			t.Fatal(err)
		}
		return e
	}
	terms := parse(`{"and":[{"exists":"kw"},{"not":{"exists":"kw"}}]}`)
	ranges := parse(`{"and":[{"range":{"n":{"gte":0}}},{"not":{"range":{"n":{"gte":0}}}}]}`)
	bitmap := func(e filter.Expr) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			bm, err := x.FilterBitmap(ctx, schema, e)
			if err == nil && !bm.IsEmpty() {
				t.Fatalf("bitmap %v, want empty", bm)
			}
			return err
		}
	}
	runs := []struct {
		name      string
		run       func(ctx context.Context) error
		minMoving int64 // looks while moving over the postings
	}{
		{"bitmap of terms", bitmap(terms), 0},
		{"bitmap of ranges", bitmap(ranges), 0},
		// The exhaustive scorer runs the filter's searcher over every
		// match; the pruned one tests each candidate against the filter's
		// bitmaps, computed like FilterBitmap's.
		{"bm25, exhaustive", func(ctx context.Context) error {
			_, err := x.Search(ctx, schema, Query{Text: "common", Filter: terms, K: 10, Exhaustive: true})
			return err
		}, n / guardEvery},
		{"bm25 of ranges, exhaustive", func(ctx context.Context) error {
			_, err := x.Search(ctx, schema, Query{Text: "common", Filter: ranges, K: 10, Exhaustive: true})
			return err
		}, n / guardEvery},
		{"bm25", func(ctx context.Context) error {
			_, err := x.Search(ctx, schema, Query{Text: "common", Filter: terms, K: 10})
			return err
		}, 0},
		{"bm25 of ranges", func(ctx context.Context) error {
			_, err := x.Search(ctx, schema, Query{Text: "common", Filter: ranges, K: 10})
			return err
		}, 0},
		// With no text, on the filter's bitmaps.
		{"no text", func(ctx context.Context) error {
			_, err := x.Search(ctx, schema, Query{Filter: terms, K: 10})
			return err
		}, 0},
		{"no text, ranges", func(ctx context.Context) error {
			_, err := x.Search(ctx, schema, Query{Filter: ranges, K: 10})
			return err
		}, 0},
	}
	for _, r := range runs {
		// Each run computes the filter's bitmaps, which FilterBitmap
		// would otherwise take from its cache.
		x.filters.retain(nil)
		count := &countdown{Context: context.Background()}
		if err := r.run(count); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		// The filter's compilation looks once per node (4), then each
		// clause once as its searcher is built (3), or once as it is
		// computed on the segment's postings (4); the rest are looks
		// while moving.
		calls := count.calls.Load()
		if calls < 4+3 {
			t.Errorf("%s: %d looks at the context, want at least 7", r.name, calls)
		}
		if moving := calls - 7; moving < r.minMoving {
			t.Errorf("%s: %d looks at the context, %d of them while moving over %d documents; want at least %d", r.name, calls, moving, n, r.minMoving)
		}
		for _, at := range []int64{1, 5, 8, calls / 2, calls} {
			x.filters.retain(nil)
			if err := r.run(&countdown{Context: context.Background(), n: at}); !errors.Is(err, context.Canceled) {
				t.Errorf("%s, context done at its look %d of %d: %v, want context.Canceled", r.name, at, calls, err)
			}
		}
	}
}
