package engine

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
)

// benchFacetDocs is the size of BenchmarkFacets's collection.
const benchFacetDocs = 100_000

// BenchmarkFacets measures facet counting over a BM25 collection of
// 100,000 propDoc documents. count/ is the counting alone
// (Shard.Facets, the filter scope) over every document and over a
// filter's 17,268 matches: four facets (lang and tags values, a year
// histogram, a monthly histogram of published) or one, and a
// disjunctive lang facet (the filter without its lang clause: 54,108
// documents). search/ is whole searches with and without facets (the
// filter scope, and the results scope's window of 100). stored-docs/
// counts the lang facet of the filter's matches from their stored
// documents instead (FilterBitmap, then GetMany), for comparison. Setup
// indexes the collection once and logs its time and the Bleve index's
// size.
func BenchmarkFacets(b *testing.B) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(11, 12))
	dir := b.TempDir()
	e, err := Open(dir, &Options{Schema: propSchema(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	start := time.Now()
	for i := 0; i < benchFacetDocs; i += 10_000 {
		docs := make([]tandem.Doc, 10_000)
		for j := range docs {
			docs[j] = propDoc(r, i+j)
			docs[j].ID = fmt.Sprint("d", i+j)
		}
		if _, err := e.Index(ctx, docs); err != nil {
			b.Fatal(err)
		}
	}
	var size int64
	filepath.WalkDir(filepath.Join(dir, "bleve"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	b.Logf("indexed %d documents in %v; bleve index %.1f MB", benchFacetDocs, time.Since(start).Round(time.Millisecond), float64(size)/1e6)
	facets := []FacetRequest{{Field: "lang"}, {Field: "tags"}, {Field: "year", Interval: 1}, {Field: "published", DateInterval: "month"}}
	f := []byte(`{"and":[{"terms":{"lang":["en","fr"]}},{"range":{"year":{"gte":2000}}}]}`)
	run := func(name string, req Request) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var docs int64
			for b.Loop() {
				res, err := e.Search(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Facets) > 0 {
					docs = res.Facets[0].Docs
				}
			}
			b.ReportMetric(float64(docs), "docs-counted")
		})
	}
	// The counting alone (Shard.Facets), then whole searches.
	count := func(name string, req Request) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var docs int64
			for b.Loop() {
				c, err := e.Shard().Facets(ctx, req, nil)
				if err != nil {
					b.Fatal(err)
				}
				docs = c[0].Docs
			}
			b.ReportMetric(float64(docs), "docs-counted")
		})
	}
	count("count/all-4", Request{Facets: facets})
	count("count/all-lang", Request{Facets: facets[:1]})
	count("count/all-year", Request{Facets: facets[2:3]})
	count("count/filtered-4", Request{Filter: f, Facets: facets})
	count("count/filtered-lang", Request{Filter: f, Facets: facets[:1]})
	count("count/disjunctive-lang", Request{Filter: f, Facets: []FacetRequest{{Field: "lang", Disjunctive: true}}})
	run("search/none", Request{Filter: f, K: 10, IDsOnly: true})
	run("search/filter-scope-4", Request{Filter: f, K: 10, IDsOnly: true, Facets: facets})
	run("search/text", Request{Text: "river stone", Filter: f, K: 10, IDsOnly: true})
	run("search/text-results-scope-4", Request{Text: "river stone", Filter: f, K: 10, IDsOnly: true, Facets: facets, FacetScope: FacetScopeResults})
	b.Run("stored-docs/filtered-one", func(b *testing.B) {
		b.ReportAllocs()
		var n int
		for b.Loop() {
			bm, err := e.FilterBitmap(ctx, f)
			if err != nil {
				b.Fatal(err)
			}
			docs, err := e.st.GetMany(bm.ToArray())
			if err != nil {
				b.Fatal(err)
			}
			counts := map[string]int{}
			for _, d := range docs {
				if s, ok := d.Fields["lang"].(string); ok {
					counts[s]++
				}
			}
			n = len(docs)
		}
		b.ReportMetric(float64(n), "docs-counted")
	})
}
