package sparse

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

// tieTexts are the texts of the tie tests' documents: few and short, so
// that many documents hold the same text and score exactly alike.
var tieTexts = []string{"zebra lion", "lion", "zebra lion zebra", "cat", "cat lion", "tiger zebra", "zebra", "lion cat tiger"}

// tieSchema has one text field and two fields to filter on, scored with
// scoring (tandem.BM25Textbook or tandem.BM25Bleve).
func tieSchema(scoring string) *tandem.Schema {
	s := &tandem.Schema{Fields: []tandem.Field{
		{Name: "text", Type: tandem.Text},
		{Name: "group", Type: tandem.Keyword},
		{Name: "year", Type: tandem.Number},
	}, BM25: &tandem.BM25{Scoring: scoring}}
	s.Fill()
	return s
}

// tieLog writes documents 0 to 1199 (one to four digits, so that their
// decimal ids sort unlike their numbers) in 150 batches of 12 puts,
// replacements and deletes in random order, and returns the batches and
// the live documents at the end.
func tieLog() ([][]storage.Change, map[uint64]*tandem.Doc) {
	r := rand.New(rand.NewPCG(43, 2))
	live := map[uint64]*tandem.Doc{}
	var batches [][]storage.Change
	seq := uint64(0)
	for range 150 {
		var b []storage.Change
		for range 12 {
			seq++
			num := uint64(r.IntN(1200))
			id := fmt.Sprint("d", num)
			if r.IntN(6) == 0 {
				b = append(b, storage.Change{Seq: seq, Op: storage.OpDelete, DocNum: num, ID: id})
				delete(live, num)
				continue
			}
			d := &tandem.Doc{ID: id, Fields: map[string]any{
				"text":  tieTexts[r.IntN(len(tieTexts))],
				"group": fmt.Sprint("g", r.IntN(3)),
				"year":  float64(2000 + r.IntN(8)),
			}}
			b = append(b, storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: id, Doc: d})
			live[num] = d
		}
		batches = append(batches, b)
	}
	return batches, live
}

// tieIndexes builds the same live documents three ways: batch by batch
// with merges (Open's index, merging in the background), batch by batch
// unmerged (every replaced and deleted document kept in its segment), and
// in one batch of the live documents in descending order, as a rebuild
// would.
func tieIndexes(t *testing.T, schema *tandem.Schema) map[string]*Index {
	t.Helper()
	ctx := context.Background()
	batches, live := tieLog()
	merged, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { merged.Close() })
	unmerged := openUnmerged(t)
	t.Cleanup(func() { unmerged.Close() })
	for _, b := range batches {
		for _, x := range []*Index{merged, unmerged} {
			if err := x.Apply(ctx, schema, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	rebuilt, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rebuilt.Close() })
	nums := slices.Sorted(func(yield func(uint64) bool) {
		for n := range live {
			if !yield(n) {
				return
			}
		}
	})
	slices.Reverse(nums)
	var all []storage.Change
	for i, n := range nums {
		all = append(all, storage.Change{Seq: uint64(i + 1), Op: storage.OpPut, DocNum: n, ID: live[n].ID, Doc: live[n]})
	}
	if err := rebuilt.Apply(ctx, schema, all); err != nil {
		t.Fatal(err)
	}
	for name, x := range map[string]*Index{"merged": merged, "unmerged": unmerged} {
		segs, _ := segmentsOf(t, x)
		t.Logf("%s: %d segments", name, len(segs))
	}
	return map[string]*Index{"merged": merged, "unmerged": unmerged, "rebuilt": rebuilt}
}

// TestTiesByDocNum checks that equal scores rank by ascending document
// number and that the cut at K keeps, of the documents tied at the K-th
// best score, the ones with the smallest numbers: every top K (and every
// page, cut from the top K+Offset) is the prefix of the full ranking,
// which is sorted by score and then document number. With textbook BM25,
// whose scores do not depend on the segment layout, three indexes holding
// the same documents, built differently, return identical hits; Bleve's
// BM25 scores shift with the layout, so its indexes are each checked
// alone. The queries have many exact ties (the documents share eight
// texts), searched with and without text and filters.
func TestTiesByDocNum(t *testing.T) {
	ctx := context.Background()
	for _, scoring := range []string{tandem.BM25Textbook, tandem.BM25Bleve} {
		t.Run("scoring="+scoring, func(t *testing.T) {
			schema := tieSchema(scoring)
			xs := tieIndexes(t, schema)
			filters := map[string]filter.Expr{
				"none":  nil,
				"year":  checkedFilter(t, schema, []byte(`{"range":{"year":{"gte":2004}}}`)),
				"group": checkedFilter(t, schema, []byte(`{"not":{"term":{"group":"g1"}}}`)),
			}
			cutInTie := false
			for _, text := range []string{"zebra lion", "lion", "cat tiger", "zebra", ""} {
				for fname, f := range filters {
					want := map[string][]Hit{} // the "merged" index's hits, by search
					for _, name := range []string{"merged", "unmerged", "rebuilt"} {
						x := xs[name]
						search := func(k int) []Hit {
							hits, err := x.Search(ctx, schema, Query{Text: text, Filter: f, K: k})
							if err != nil {
								t.Fatal(err)
							}
							return hits
						}
						full := search(5000)
						if len(full) < 100 {
							t.Fatalf("%q: %d hits; the test needs more", text, len(full))
						}
						for i := 1; i < len(full); i++ {
							a, b := full[i-1], full[i]
							if a.Score < b.Score || a.Score == b.Score && a.DocNum >= b.DocNum {
								t.Fatalf("%s %q filter %s: hit %d (%d, %v) before hit %d (%d, %v)", name, text, fname, i-1, a.DocNum, a.Score, i, b.DocNum, b.Score)
							}
						}
						got := map[string][]Hit{"full": full}
						for _, k := range []int{1, 3, 7, 10, 25, 60, 150} {
							hits := search(k)
							if !slices.Equal(hits, full[:k]) {
								t.Errorf("%s %q filter %s top %d:\n got %v\nwant %v", name, text, fname, k, hits, full[:k])
							}
							cutInTie = cutInTie || full[k-1].Score == full[k].Score
							got[fmt.Sprint("top ", k)] = hits
						}
						for _, p := range []struct{ offset, k int }{{5, 10}, {20, 7}, {40, 25}} {
							page := search(p.offset + p.k)[p.offset:]
							if !slices.Equal(page, full[p.offset:p.offset+p.k]) {
								t.Errorf("%s %q filter %s page %d+%d:\n got %v\nwant %v", name, text, fname, p.offset, p.k, page, full[p.offset:p.offset+p.k])
							}
							got[fmt.Sprintf("page %d+%d", p.offset, p.k)] = page
						}
						if scoring == tandem.BM25Bleve {
							continue
						}
						if name == "merged" {
							want = got
							continue
						}
						for what, hits := range got {
							if !slices.Equal(hits, want[what]) {
								t.Errorf("%q filter %s %s: %s differs from merged\n got %v\nwant %v", text, fname, what, name, hits, want[what])
							}
						}
					}
				}
			}
			if !cutInTie {
				t.Error("no K cuts through a tie; the test needs one")
			}
		})
	}
}

// TestSearchAllMatchesBleve holds a search with no text (searchAll, on
// the filter's bitmaps) to Bleve's match-all query under the compiled
// filter, cut by cutQuery: the same hits, scores included, for every K,
// on the merged, unmerged and rebuilt indexes of the tie tests.
func TestSearchAllMatchesBleve(t *testing.T) {
	ctx := context.Background()
	schema := tieSchema(tandem.BM25Textbook)
	xs := tieIndexes(t, schema)
	for _, fj := range []string{
		"",
		`{"term":{"group":"g1"}}`,
		`{"not":{"term":{"group":"g1"}}}`,
		`{"range":{"year":{"gte":2003,"lt":2006}}}`,
		`{"and":[{"term":{"group":"g2"}},{"range":{"year":{"gte":2004}}}]}`,
		`{"prefix":{"group":"g"}}`,
		`{"exists":"year"}`,
		`{"term":{"group":"none"}}`,
	} {
		var e filter.Expr
		var bq query.Query = query.NewMatchAllQuery()
		if fj != "" {
			e = checkedFilter(t, schema, []byte(fj))
			fq, err := Compile(ctx, e, schema)
			if err != nil {
				t.Fatal(err)
			}
			b := query.NewBooleanQuery(nil, nil, nil)
			b.Must = bq
			b.AddFilter(fq)
			bq = b
		}
		for name, x := range xs {
			for _, k := range []int{1, 7, 50, 5000} {
				got, err := x.Search(ctx, schema, Query{Filter: e, K: k})
				if err != nil {
					t.Fatal(err)
				}
				want, err := x.search(ctx, &cutQuery{q: bq, limit: k, docNums: &x.docNums}, k, "")
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s, filter %s, top %d:\n got %v\nwant %v", name, fj, k, got, want)
				}
			}
		}
	}
}

// Searches choosing among equal scores share the index's cache of
// document numbers with each other and with FilterBitmap while Apply
// changes the index and Bleve merges it: every ranking stays ordered by
// score, then document number, and full (run with -race).
func TestTiesDuringApply(t *testing.T) {
	ctx := context.Background()
	schema := tieSchema(tandem.BM25Textbook)
	x := openIndex(t)
	batches, _ := tieLog()
	if err := x.Apply(ctx, schema, slices.Concat(batches[:50]...)); err != nil {
		t.Fatal(err)
	}
	half := checkedFilter(t, schema, []byte(`{"not":{"term":{"group":"g1"}}}`))
	done := make(chan struct{})
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	for _, q := range []Query{{Text: "zebra lion", K: 10}, {K: 10, Filter: half}, {Text: "cat", K: 25, Filter: half}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				hits, err := x.Search(ctx, schema, q)
				if err == nil && len(hits) != q.K {
					err = fmt.Errorf("%d hits, want %d", len(hits), q.K)
				}
				for i := 1; err == nil && i < len(hits); i++ {
					if a, b := hits[i-1], hits[i]; a.Score < b.Score || a.Score == b.Score && a.DocNum >= b.DocNum {
						err = fmt.Errorf("hit %d (%d, %v) before hit %d (%d, %v)", i-1, a.DocNum, a.Score, i, b.DocNum, b.Score)
					}
				}
				if err == nil {
					_, err = x.FilterBitmap(ctx, schema, half)
				}
				if err != nil {
					errs <- fmt.Errorf("%+v: %w", q, err)
					return
				}
			}
		}()
	}
	for _, b := range batches[50:] {
		if err := x.Apply(ctx, schema, b); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTopK holds topK, and bm25Searcher.cut through it, to sorting: the
// documents kept are the first K by score, then by document number, on
// random scores with many ties and document numbers unlike the
// snapshot's order; a document's number is asked for at most once.
func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.IntN(300)
		scores := make([]float64, n)
		for i := range scores {
			scores[i] = float64(rng.IntN(1 + rng.IntN(20))) // many ties
		}
		nums := rng.Perm(10 * n)[:n] // by the snapshot's number
		asked := map[uint64]int{}
		docNum := func(d uint64) (uint64, error) {
			asked[d]++
			return uint64(nums[d]), nil
		}
		k := 1 + rng.IntN(n+2)
		s := &bm25Searcher{}
		for i := range scores {
			s.docs = append(s.docs, uint64(i))
			s.scores = append(s.scores, scores[i])
		}
		if err := s.cut(context.Background(), k, docNum); err != nil {
			t.Fatal(err)
		}
		type hit struct {
			score float64
			num   int
		}
		var got, want []hit
		for i, d := range s.docs {
			if i > 0 && d <= s.docs[i-1] {
				t.Fatalf("documents %d then %d: not in the snapshot's order", s.docs[i-1], d)
			}
			got = append(got, hit{s.scores[i], nums[d]})
		}
		for i := range scores {
			want = append(want, hit{scores[i], nums[i]})
		}
		order := func(a, b hit) int {
			if c := cmp.Compare(b.score, a.score); c != 0 {
				return c
			}
			return cmp.Compare(a.num, b.num)
		}
		slices.SortFunc(got, order)
		slices.SortFunc(want, order)
		if !slices.Equal(got, want[:min(k, n)]) {
			t.Fatalf("top %d of %v (numbers %v):\n got %v\nwant %v", k, scores, nums, got, want[:min(k, n)])
		}
		for d, c := range asked {
			if c > 1 {
				t.Fatalf("document %d's number asked for %d times", d, c)
			}
		}
	}
	// Distinct scores need no document number.
	top := &topK{limit: 3, docNum: func(uint64) (uint64, error) { return 0, errors.New("asked") }}
	for i := range 100 {
		top.add(ranked{doc: uint64(i), score: float64(i * 7 % 100)})
	}
	if top.err != nil {
		t.Fatal(top.err)
	}
}

// benchIndex builds an index of docs synthetic documents of 3 to 12 words
// from a vocabulary of 2,000 (Zipf-distributed), one in ten with the text
// "tie breaker", and a group of two values, applied in batches of 2,000
// and reopened.
func benchIndex(b *testing.B, schema *tandem.Schema, docs int) *Index {
	ctx := context.Background()
	const batch, vocab = 2000, 2000
	dir := filepath.Join(b.TempDir(), "bleve")
	x, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	zipf := rand.NewZipf(r, 1.1, 1, vocab-1)
	changes := make([]storage.Change, 0, batch)
	for num := range uint64(docs) {
		text := "tie breaker"
		if num%10 != 0 {
			w := make([]string, 3+r.IntN(10))
			for i := range w {
				w[i] = fmt.Sprint("w", zipf.Uint64())
			}
			text = strings.Join(w, " ")
		}
		d := tandem.Doc{ID: fmt.Sprint("d", num), Fields: map[string]any{"text": text, "group": fmt.Sprint("g", r.IntN(2)), "year": float64(2000 + r.IntN(8))}}
		changes = append(changes, storage.Change{Seq: num + 1, Op: storage.OpPut, DocNum: num, ID: d.ID, Doc: &d})
		if len(changes) == batch || int(num) == docs-1 {
			if err := x.Apply(ctx, schema, changes); err != nil {
				b.Fatal(err)
			}
			changes = changes[:0]
		}
	}
	if err := x.Close(); err != nil {
		b.Fatal(err)
	}
	if x, err = Open(dir); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Close() })
	return x
}

// benchCase is one search of BenchmarkSearch; cold empties the index's
// cache of document numbers before each call, as after a merge that
// replaced every segment. With run set, it runs that search instead.
type benchCase struct {
	name string
	q    Query
	cold bool
	run  func(ctx context.Context, x *Index, k int) (int, error)
}

// sortByID is the design Search does not use, measured beside it: Bleve's
// collector sorting a match-all by score, then by id. It orders the
// decimal ids as strings, not numbers, but costs what a numeric sort
// would at least: the id of every match, loaded to compute its sort key.
func sortByID(ctx context.Context, x *Index, k int) (int, error) {
	req := bleve.NewSearchRequestOptions(query.NewMatchAllQuery(), k, 0, false)
	req.SortBy([]string{"-_score", "_id"})
	res, err := x.idx.SearchInContext(ctx, req)
	if err != nil {
		return 0, err
	}
	return len(res.Hits), nil
}

// BenchmarkSearch measures Search over 200,000 documents (benchIndex):
// two-word queries at K 10 and 100, with and without a filter keeping
// half the documents, a query every match of which ties ("tie", 20,000
// documents), searches with no text (200,000 tied), filtered and not, the
// sort by id (sortByID) that Search does not use, and the same searches
// with Bleve's BM25. The package doc (Equal scores) has the
// figures.
func BenchmarkSearch(b *testing.B) {
	textbook := tieSchema(tandem.BM25Textbook)
	half := checkedFilter(b, textbook, []byte(`{"term":{"group":"g0"}}`))
	x := benchIndex(b, textbook, 200_000)
	benchSearches(b, x, textbook, []benchCase{
		{"bm25/k10", Query{Text: "w3 w17", K: 10}, false, nil},
		{"bm25/k100", Query{Text: "w3 w17", K: 100}, false, nil},
		{"bm25/filtered-k10", Query{Text: "w3 w17", K: 10, Filter: half}, false, nil},
		{"bm25/ties-k10", Query{Text: "tie", K: 10}, false, nil},
		{"bm25/ties-k10/cold", Query{Text: "tie", K: 10}, true, nil},
		{"notext/k10", Query{K: 10}, false, nil},
		{"notext/k10/cold", Query{K: 10}, true, nil},
		{"notext/filtered-k10", Query{K: 10, Filter: half}, false, nil},
		{"notext/k10/sort-by-id", Query{K: 10}, false, sortByID},
	})
	bleveScoring := tieSchema(tandem.BM25Bleve)
	y := benchIndex(b, bleveScoring, 200_000)
	benchSearches(b, y, bleveScoring, []benchCase{
		{"bleve/k10", Query{Text: "w3 w17", K: 10}, false, nil},
		{"bleve/filtered-k10", Query{Text: "w3 w17", K: 10, Filter: half}, false, nil},
		{"bleve/ties-k10", Query{Text: "tie", K: 10}, false, nil},
		{"bleve/ties-k10/cold", Query{Text: "tie", K: 10}, true, nil},
	})
}

// BenchmarkSearchMillion measures the searches whose every match ties
// over 1,000,000 documents (benchIndex): "tie" (100,000 matches) and no
// text (all of them), filtered and not, and the sort by id (sortByID)
// that Search does not use.
func BenchmarkSearchMillion(b *testing.B) {
	schema := tieSchema(tandem.BM25Textbook)
	half := checkedFilter(b, schema, []byte(`{"term":{"group":"g0"}}`))
	x := benchIndex(b, schema, 1_000_000)
	benchSearches(b, x, schema, []benchCase{
		{"bm25/ties-k10", Query{Text: "tie", K: 10}, false, nil},
		{"bm25/ties-k10/cold", Query{Text: "tie", K: 10}, true, nil},
		{"notext/k10", Query{K: 10}, false, nil},
		{"notext/k10/cold", Query{K: 10}, true, nil},
		{"notext/filtered-k10", Query{K: 10, Filter: half}, false, nil},
		{"notext/filtered-k1000", Query{K: 1000, Filter: half}, false, nil},
		{"notext/k10/sort-by-id", Query{K: 10}, false, sortByID},
	})
}

func benchSearches(b *testing.B, x *Index, schema *tandem.Schema, cases []benchCase) {
	ctx := context.Background()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.cold {
					x.docNums.retain(nil)
				}
				var n int
				if c.run != nil {
					var err error
					if n, err = c.run(ctx, x, c.q.K); err != nil {
						b.Fatal(err)
					}
				} else {
					hits, err := x.Search(ctx, schema, c.q)
					if err != nil {
						b.Fatal(err)
					}
					n = len(hits)
				}
				if n != c.q.K {
					b.Fatalf("%d hits, want %d", n, c.q.K)
				}
			}
		})
	}
}

// BenchmarkPruning measures the textbook scorer pruned (block-max
// MaxScore, the default) against Query.Exhaustive over 500,000 documents
// of Zipf-distributed words (benchIndex): two common terms, five terms of
// mixed frequency, a rare and a common one, at K 10 and 100, and under a
// filter keeping half the documents. Each query runs twice before the
// timing, which computes its terms' blocks and decodes their postings.
// pruned-zap/ is the pruned scorer reading every list through zap's
// iterator, as it does a list the cache has not decoded. docs/bm25.md has
// the figures.
func BenchmarkPruning(b *testing.B) {
	schema := tieSchema(tandem.BM25Textbook)
	half := checkedFilter(b, schema, []byte(`{"term":{"group":"g0"}}`))
	x := benchIndex(b, schema, 500_000)
	var cases []benchCase
	for _, c := range []struct {
		name string
		q    Query
	}{
		{"common2-k10", Query{Text: "w3 w17", K: 10}},
		{"common2-k100", Query{Text: "w3 w17", K: 100}},
		{"mixed5-k10", Query{Text: "w1 w9 w60 w400 w1500", K: 10}},
		{"rare-common-k10", Query{Text: "w1200 w2", K: 10}},
		{"common2-filtered-k10", Query{Text: "w3 w17", K: 10, Filter: half}},
	} {
		for _, exhaustive := range []bool{false, true} {
			q := c.q
			q.Exhaustive = exhaustive
			name := "pruned/" + c.name
			if exhaustive {
				name = "exhaustive/" + c.name
			}
			for range 2 {
				if _, err := x.Search(context.Background(), schema, q); err != nil {
					b.Fatal(err)
				}
			}
			cases = append(cases, benchCase{name: name, q: q})
		}
	}
	benchSearches(b, x, schema, cases)
	defer func(a int) { decodeAfter = a }(decodeAfter)
	decodeAfter = math.MaxInt
	x.blocks.retain(nil)
	var viaZap []benchCase
	for _, c := range cases {
		if !c.q.Exhaustive {
			if _, err := x.Search(context.Background(), schema, c.q); err != nil {
				b.Fatal(err)
			}
			viaZap = append(viaZap, benchCase{name: strings.Replace(c.name, "pruned/", "pruned-zap/", 1), q: c.q})
		}
	}
	benchSearches(b, x, schema, viaZap)
}
