package sparse

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/blevesearch/bleve/v2/search/query"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

// A filter's prefix clause (prefixQuery, which reads each segment's
// dictionary itself) matches exactly what Bleve's prefix query matches,
// over several segments with replaced and deleted documents, on keyword
// and keywords fields, for prefixes matching nothing, one term, many, or
// every term.
func TestPrefixMatchesBleve(t *testing.T) {
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "kw", Type: tandem.Keyword}, {Name: "tags", Type: tandem.Keywords}}}
	schema.Fill()
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx := context.Background()
	seq := uint64(0)
	for batch := range 8 {
		var changes []storage.Change
		for i := range 50 {
			num := uint64(batch*50 + i)
			d := tandem.Doc{ID: fmt.Sprint("d", num), Fields: map[string]any{
				"kw":   fmt.Sprintf("k%03d", num%170),
				"tags": []any{fmt.Sprintf("t%d", num%7), fmt.Sprintf("é%d", num%3), "\xff\xfe"},
			}}
			seq++
			changes = append(changes, storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: d.ID, Doc: &d})
		}
		for _, gone := range []uint64{uint64(batch * 11), uint64(batch*37 + 3)} {
			seq++
			changes = append(changes, storage.Change{Seq: seq, Op: storage.OpDelete, DocNum: gone, ID: fmt.Sprint("d", gone)})
		}
		if err := x.Apply(ctx, schema, changes); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ field, prefix string }{
		{"kw", ""}, {"kw", "k"}, {"kw", "k0"}, {"kw", "k16"}, {"kw", "k042"}, {"kw", "k0420"}, {"kw", "z"},
		{"tags", "t"}, {"tags", "t3"}, {"tags", "é"}, {"tags", "é1"}, {"tags", "\xff"}, {"tags", "\xff\xfe"}, {"tags", "k"},
	} {
		bleve := query.NewPrefixQuery(tc.prefix)
		bleve.SetField(tc.field)
		want, err := x.search(ctx, bleve, 1000, "none")
		if err != nil {
			t.Fatal(err)
		}
		got, err := x.search(ctx, &prefixQuery{field: tc.field, prefix: tc.prefix}, 1000, "none")
		if err != nil {
			t.Fatal(err)
		}
		nums := func(hs []Hit) []uint64 {
			out := make([]uint64, len(hs))
			for i, h := range hs {
				out[i] = h.DocNum
			}
			slices.Sort(out)
			return out
		}
		if !slices.Equal(nums(got), nums(want)) {
			t.Errorf("prefix %q of %s: %d documents, Bleve's %d", tc.prefix, tc.field, len(got), len(want))
		}
	}
}

// A prefix clause over many terms stops when its context is done, while
// it reads the terms: it looks every prefixCheckEvery terms.
func TestPrefixHonoursContext(t *testing.T) {
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "kw", Type: tandem.Keyword}}}
	schema.Fill()
	const n = 5000
	docs := make([]tandem.Doc, n)
	for i := range docs {
		docs[i] = tandem.Doc{ID: fmt.Sprint("d", i), Fields: map[string]any{"kw": fmt.Sprintf("k%05d", i)}}
	}
	x := testIndex(t, schema, docs...)
	e, err := filter.Parse([]byte(`{"prefix":{"kw":"k"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := filter.Check(e, schema); err != nil {
		t.Fatal(err)
	}
	// Each call computes the prefix's bitmaps, which FilterBitmap would
	// otherwise take from its cache after the first.
	x.filters.retain(nil)
	count := &countdown{Context: context.Background()}
	bm, err := x.FilterBitmap(count, schema, e)
	if err != nil || bm.GetCardinality() != n {
		t.Fatalf("bitmap of %d documents, %v; want %d", bm.GetCardinality(), err, n)
	}
	if calls := count.calls.Load(); calls < n/prefixCheckEvery {
		t.Errorf("%d looks at the context over %d terms; want at least %d", calls, n, n/prefixCheckEvery)
	}
	// Compile looks once, and the guarded clause once: the third look is
	// the prefix searcher's, among the terms.
	x.filters.retain(nil)
	if _, err := x.FilterBitmap(&countdown{Context: context.Background(), n: 3}, schema, e); !errors.Is(err, context.Canceled) {
		t.Errorf("context done at the prefix's first look: %v, want context.Canceled", err)
	}
}
