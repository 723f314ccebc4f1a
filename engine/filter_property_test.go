package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

var (
	propWords = strings.Fields("river stone light cloud storm field mountain valley forest ocean quiet signal network protein cell energy")
	propLangs = []string{"en", "fr", "de", "es", "it"}
	propTags  = []string{"bio", "med", "geo", "phys", "chem", "cs"}
)

func propSchema() *tandem.Schema {
	return &tandem.Schema{IDField: "id", Strict: true, Fields: []tandem.Field{
		{Name: "title", Type: tandem.Text},
		{Name: "text", Type: tandem.Text},
		{Name: "lang", Type: tandem.Keyword},
		{Name: "tags", Type: tandem.Keywords},
		{Name: "year", Type: tandem.Number},
		{Name: "published", Type: tandem.Date},
		{Name: "open", Type: tandem.Bool},
	}}
}

func propDoc(r *rand.Rand, i int) tandem.Doc {
	words := func(n int) string {
		w := make([]string, n)
		for j := range w {
			w[j] = propWords[r.IntN(len(propWords))]
		}
		return strings.Join(w, " ")
	}
	f := map[string]any{"title": words(1 + r.IntN(4)), "text": words(5 + r.IntN(30))}
	// Each metadata field is missing from about one document in five, so
	// that exists and not have something to do.
	if r.IntN(5) > 0 {
		f["lang"] = propLangs[r.IntN(len(propLangs))]
	}
	if r.IntN(5) > 0 {
		var tags []any
		for range r.IntN(4) {
			tags = append(tags, propTags[r.IntN(len(propTags))])
		}
		f["tags"] = tags
	}
	if r.IntN(5) > 0 {
		f["year"] = float64(1990 + r.IntN(31))
	}
	if r.IntN(5) > 0 {
		f["published"] = fmt.Sprintf("20%02d-%02d-%02dT%02d:00:00Z", r.IntN(25), 1+r.IntN(12), 1+r.IntN(28), r.IntN(24))
	}
	if r.IntN(5) > 0 {
		f["open"] = r.IntN(2) == 0
	}
	return tandem.Doc{ID: fmt.Sprintf("d%03d", i), Fields: f}
}

// propFilter returns a random filter as JSON.
func propFilter(r *rand.Rand, depth int) any {
	n := 8
	if depth >= 3 {
		n = 5 // leaves only
	}
	date := func() string { return fmt.Sprintf("20%02d-%02d-01", r.IntN(25), 1+r.IntN(12)) }
	bounds := func(val func() any) map[string]any {
		b := map[string]any{}
		if r.IntN(2) == 0 {
			b[[]string{"gt", "gte"}[r.IntN(2)]] = val()
		}
		if len(b) == 0 || r.IntN(2) == 0 {
			b[[]string{"lt", "lte"}[r.IntN(2)]] = val()
		}
		return b
	}
	switch r.IntN(n) {
	case 0:
		switch r.IntN(4) {
		case 0:
			return map[string]any{"term": map[string]any{"lang": propLangs[r.IntN(len(propLangs))]}}
		case 1:
			return map[string]any{"term": map[string]any{"tags": propTags[r.IntN(len(propTags))]}}
		case 2:
			return map[string]any{"term": map[string]any{"year": 1990 + r.IntN(31)}}
		default:
			return map[string]any{"term": map[string]any{"open": r.IntN(2) == 0}}
		}
	case 1:
		vals := []any{}
		for range 1 + r.IntN(3) {
			vals = append(vals, propTags[r.IntN(len(propTags))])
		}
		field := "tags"
		if r.IntN(2) == 0 {
			field = "lang"
			for i := range vals {
				vals[i] = propLangs[r.IntN(len(propLangs))]
			}
		}
		return map[string]any{"terms": map[string]any{field: vals}}
	case 2:
		if r.IntN(2) == 0 {
			return map[string]any{"range": map[string]any{"year": bounds(func() any { return 1988 + r.IntN(35) })}}
		}
		return map[string]any{"range": map[string]any{"published": bounds(func() any { return date() })}}
	case 3:
		p := propTags[r.IntN(len(propTags))][:1]
		if r.IntN(2) == 0 {
			return map[string]any{"prefix": map[string]any{"lang": propLangs[r.IntN(len(propLangs))][:1]}}
		}
		return map[string]any{"prefix": map[string]any{"tags": p}}
	case 4:
		return map[string]any{"exists": []string{"lang", "tags", "year", "published", "open"}[r.IntN(5)]}
	case 5:
		return map[string]any{"not": propFilter(r, depth+1)}
	case 6, 7:
		op := []string{"and", "or"}[r.IntN(2)]
		var kids []any
		for range r.IntN(4) {
			kids = append(kids, propFilter(r, depth+1))
		}
		if kids == nil {
			kids = []any{}
		}
		return map[string]any{op: kids}
	}
	panic("unreachable")
}

// TestFilterProperty checks, for random typed filters over a synthetic
// collection, that every hit satisfies its filter, that the filtered BM25
// ranking is exactly the unfiltered ranking restricted to matching
// documents (same order, same scores), and that the filter bitmap holds
// exactly the matching documents.
func TestFilterProperty(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	e, err := Open(t.TempDir(), &Options{Schema: propSchema(), BatchSize: 70, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const n = 400
	docs := make([]tandem.Doc, n)
	for i := range docs {
		docs[i] = propDoc(r, i)
	}
	if _, err := e.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	// Upserts and deletes move documents between segments.
	if _, err := e.Index(ctx, []tandem.Doc{propDoc(r, 5), propDoc(r, 77)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Delete(ctx, []string{"d010", "d200"}); err != nil {
		t.Fatal(err)
	}
	schema := e.Schema()
	stored := map[string]map[string]any{}
	if err := e.Shard().Store().ScanDocs(ctx, func(_ uint64, d tandem.Doc) error {
		stored[d.ID] = d.Fields
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	iters := 300
	if testing.Short() {
		iters = 60
	}
	nonEmpty := 0
	for it := range iters {
		fj, _ := json.Marshal(propFilter(r, 0))
		expr, err := filter.Parse(fj)
		if err != nil {
			t.Fatalf("filter %s: %v", fj, err)
		}
		if err := filter.Check(expr, schema); err != nil {
			t.Fatalf("filter %s: %v", fj, err)
		}
		want := map[string]bool{}
		for id, f := range stored {
			if filter.Match(expr, schema, f) {
				want[id] = true
			}
		}

		bm, err := e.FilterBitmap(ctx, fj)
		if err != nil {
			t.Fatalf("FilterBitmap(%s): %v", fj, err)
		}
		if int(bm.GetCardinality()) != len(want) {
			t.Fatalf("filter %s: bitmap has %d docs, Match accepts %d", fj, bm.GetCardinality(), len(want))
		}
		for id := range want {
			num, _, _ := e.Shard().Store().Lookup(id)
			if !bm.Contains(num) {
				t.Fatalf("filter %s: bitmap lacks %s", fj, id)
			}
		}

		text := propWords[r.IntN(len(propWords))] + " " + propWords[r.IntN(len(propWords))]
		if it%10 == 9 {
			text = "" // filter only
		}
		// Every other search asks for ids alone, which are not checked
		// again on the stored documents when the indexes are current.
		filtered, err := e.Search(ctx, Request{Text: text, Filter: fj, K: n, IDsOnly: it%2 == 0})
		if err != nil {
			t.Fatalf("search %q filter %s: %v", text, fj, err)
		}
		for _, h := range filtered.Hits {
			if !want[h.ID] {
				t.Fatalf("filter %s: hit %s does not satisfy it", fj, h.ID)
			}
		}
		if text == "" {
			if len(filtered.Hits) != len(want) {
				t.Fatalf("filter-only %s: %d hits, want %d", fj, len(filtered.Hits), len(want))
			}
			continue
		}
		all, err := e.Search(ctx, Request{Text: text, K: n})
		if err != nil {
			t.Fatal(err)
		}
		var restricted []tandem.Hit
		for _, h := range all.Hits {
			if want[h.ID] {
				restricted = append(restricted, h)
			}
		}
		if len(restricted) != len(filtered.Hits) {
			t.Fatalf("query %q filter %s: %d filtered hits, %d in the restricted ranking", text, fj, len(filtered.Hits), len(restricted))
		}
		// Same scores rank by rank; documents with exactly equal scores may
		// come in either order (Bleve breaks ties by segment layout), so
		// each run of equal scores is compared as a set.
		for i := 0; i < len(restricted); {
			j := i
			got, exp := map[string]bool{}, map[string]bool{}
			for ; j < len(restricted) && restricted[j].Score == restricted[i].Score; j++ {
				if filtered.Hits[j].Score != restricted[j].Score {
					t.Fatalf("query %q filter %s: rank %d is %s (%v), restricted ranking has %s (%v)", text, fj, j,
						filtered.Hits[j].ID, filtered.Hits[j].Score, restricted[j].ID, restricted[j].Score)
				}
				got[filtered.Hits[j].ID] = true
				exp[restricted[j].ID] = true
			}
			if !maps.Equal(got, exp) {
				t.Fatalf("query %q filter %s: ranks %d-%d hold %v, restricted ranking %v", text, fj, i, j-1, got, exp)
			}
			i = j
		}
		if len(restricted) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty < iters/4 {
		t.Errorf("only %d of %d filtered rankings were non-empty: the generator is too selective", nonEmpty, iters)
	}
}

// BenchmarkFilteredSearch measures filtered BM25 and filter bitmaps over a
// synthetic collection of 5,000 documents.
func BenchmarkFilteredSearch(b *testing.B) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	e, err := Open(b.TempDir(), &Options{Schema: propSchema(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	docs := make([]tandem.Doc, 5000)
	for i := range docs {
		docs[i] = propDoc(r, i)
		docs[i].ID = fmt.Sprint("d", i)
	}
	if _, err := e.Index(ctx, docs); err != nil {
		b.Fatal(err)
	}
	f := []byte(`{"and":[{"terms":{"lang":["en","fr"]}},{"range":{"year":{"gte":2000}}}]}`)
	b.Run("search", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Search(ctx, Request{Text: "river stone", Filter: f, K: 10, IDsOnly: true}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
	})
	b.Run("bitmap", func(b *testing.B) {
		b.ReportAllocs()
		var n uint64
		for b.Loop() {
			bm, err := e.FilterBitmap(ctx, f)
			if err != nil {
				b.Fatal(err)
			}
			n = bm.GetCardinality()
		}
		b.ReportMetric(float64(n), "docs-matched")
	})
}
