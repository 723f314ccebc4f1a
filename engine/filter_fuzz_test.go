package engine

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

// filterFuzzDocs are the documents of FuzzFilter's collection: the
// property test's generated ones, plus values at the edges of each type.
func filterFuzzDocs() []tandem.Doc {
	r := rand.New(rand.NewPCG(5, 6))
	docs := make([]tandem.Doc, 0, 160)
	for i := range 150 {
		docs = append(docs, propDoc(r, i))
	}
	edge := []map[string]any{
		{"lang": "", "tags": []any{""}, "year": 0.0, "open": false},
		{"lang": "EN", "tags": []any{"Bio", "bio"}, "year": -1.5, "published": "1678-01-01"},
		{"lang": "en fr", "tags": []any{"a b", "ü"}, "year": 1e300, "published": "2261-12-31T23:59:59.999999999Z"},
		{"lang": "*", "tags": []any{"?", "\\"}, "year": -1e-300, "published": "1970-01-01T00:00:00Z"},
		{"lang": "é", "year": 9007199254740993.0, "published": "1969-12-31T23:59:59.5Z"},
		{"tags": []any{}, "year": 2000.5},
	}
	for i, f := range edge {
		f["text"] = "edge document"
		docs = append(docs, tandem.Doc{ID: "edge" + string(rune('a'+i)), Fields: f})
	}
	return docs
}

// FuzzFilter checks the filter language end to end on a fuzzed filter:
// Parse and Check fail with a *filter.Error or accept it, and then the
// three evaluations agree on every document of a fixed collection:
// filter.Match on the stored fields (the reference), the Bleve query
// sparse compiles (a filter-only BM25 search) and the filter's bitmap.
func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		`{"term":{"lang":"en"}}`,
		`{"terms":{"tags":["bio","geo"]}}`,
		`{"range":{"year":{"gte":1995,"lt":2005}}}`,
		`{"range":{"published":{"gt":"2010-01-01","lte":"2020-06-01T12:00:00Z"}}}`,
		`{"prefix":{"tags":"b"}}`,
		`{"exists":"published"}`,
		`{"not":{"exists":"lang"}}`,
		`{"and":[{"term":{"open":true}},{"or":[{"prefix":{"lang":"e"}},{"range":{"year":{"lt":2000}}}]}]}`,
		`{"or":[]}`, `{"and":[]}`,
		`{"term":{"lang":""}}`, `{"prefix":{"lang":""}}`, `{"term":{"tags":"a b"}}`,
		`{"term":{"year":1e300}}`, `{"range":{"year":{"gt":-1e-300,"lt":1e-300}}}`,
		`{"term":{"year":9007199254740993}}`, `{"term":{"published":"1678-01-01"}}`,
		`{"range":{"published":{"gte":"1969-12-31T23:59:59Z","lt":"1970-01-01T00:00:01Z"}}}`,
		`{"prefix":{"lang":"*"}}`, `{"prefix":{"tags":"\\"}}`, `{"term":{"lang":"EN"}}`,
		`{"not":{"not":{"term":{"open":false}}}}`, `{"terms":{"year":[0,2000.5]}}`,
	} {
		f.Add([]byte(s))
	}
	ctx := context.Background()
	e, err := Open(f.TempDir(), &Options{Schema: propSchema(), BatchSize: 40, NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	if _, err := e.Index(ctx, filterFuzzDocs()); err != nil {
		f.Fatal(err)
	}
	if _, err := e.Delete(ctx, []string{"d003", "d100"}); err != nil {
		f.Fatal(err)
	}
	schema := e.Schema()
	stored := map[string]map[string]any{}
	nums := map[uint64]string{}
	if err := e.Shard().Store().ScanDocs(ctx, func(num uint64, d tandem.Doc) error {
		stored[d.ID], nums[num] = d.Fields, d.ID
		return nil
	}); err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		expr, err := filter.Parse(data)
		if err == nil {
			err = filter.Check(expr, schema)
		}
		if err != nil {
			var fe *filter.Error
			if !errors.As(err, &fe) || !errors.Is(err, filter.ErrInvalid) {
				t.Fatalf("error %v is not a *filter.Error", err)
			}
			return
		}
		want := map[string]bool{}
		for id, fields := range stored {
			if filter.Match(expr, schema, fields) {
				want[id] = true
			}
		}
		bm, err := e.FilterBitmap(ctx, data)
		if err != nil {
			t.Fatalf("FilterBitmap of a checked filter: %v", err)
		}
		it := bm.Iterator()
		for it.HasNext() {
			num := it.Next()
			id, ok := nums[num]
			if !ok {
				t.Fatalf("bitmap holds %d, which is no live document", num)
			}
			if !want[id] {
				t.Fatalf("bitmap holds %s (%v), which Match refuses", id, fieldsJSON(stored[id]))
			}
		}
		if int(bm.GetCardinality()) != len(want) {
			for id := range want {
				num, _, _ := e.Shard().Store().Lookup(id)
				if !bm.Contains(num) {
					t.Fatalf("bitmap lacks %s (%v), which Match accepts", id, fieldsJSON(stored[id]))
				}
			}
		}
		res, err := e.Search(ctx, Request{Filter: data, K: len(stored) + 1, IDsOnly: true})
		if err != nil {
			t.Fatalf("filter-only search: %v", err)
		}
		got := map[string]bool{}
		for _, h := range res.Hits {
			if got[h.ID] {
				t.Fatalf("hit %s twice", h.ID)
			}
			got[h.ID] = true
			if !want[h.ID] {
				t.Fatalf("Bleve finds %s (%v), which Match refuses", h.ID, fieldsJSON(stored[h.ID]))
			}
		}
		for id := range want {
			if !got[id] {
				t.Fatalf("Bleve misses %s (%v), which Match accepts", id, fieldsJSON(stored[id]))
			}
		}
	})
}

func fieldsJSON(m map[string]any) string {
	b, _ := json.Marshal(m)
	return string(b)
}
