package engine

import (
	"context"
	"testing"

	"github.com/tandemsearch/tandem"
)

// TestSingleHitFusedScore checks issue #15's rule for a fused list of one
// document (fusion/doc.go): it is each list's best, so it scores the sum of
// the weights under min-max, never 0, and the other methods follow their
// documented values.
func TestSingleHitFusedScore(t *testing.T) {
	ctx := context.Background()
	schema := tandem.DefaultSchema()
	schema.Fields = append(schema.Fields, tandem.Field{Name: "lang", Type: tandem.Keyword})
	schema.Models = []tandem.Model{{Name: "ext", Dense: true, Dim: 3, Similarity: tandem.Cosine, External: true}}
	e, err := Open(t.TempDir(), &Options{Schema: schema, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	vec := func(v ...float32) map[string]tandem.Vectors { return map[string]tandem.Vectors{"ext": {Dense: v}} }
	docs := []tandem.Doc{
		{ID: "a", Fields: map[string]any{"text": "the road north", "lang": "en"}, Vectors: vec(1, 0, 0)},
		{ID: "b", Fields: map[string]any{"text": "the road east", "lang": "fr"}, Vectors: vec(0, 1, 0)},
		{ID: "c", Fields: map[string]any{"text": "a river", "lang": "fr"}, Vectors: vec(0, 0, 1)},
	}
	if _, err := e.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fusion string
		want   float64 // with weights bm25 1, dense 2
	}{
		{"minmax", 3}, {"combsum", 2}, {"combmnz", 4}, {"dbsf", 1.5}, {"zscore", 0}, {"max", 3},
	} {
		res, err := e.Search(ctx, Request{
			Text:       "road",
			Filter:     []byte(`{"term":{"lang":"en"}}`),
			Retrievers: []string{"bm25", "dense"},
			Fusion:     tc.fusion,
			Weight:     map[string]float64{"dense": 2},
			Vectors:    vec(0.2, 0.9, 0.1),
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.fusion, err)
		}
		if len(res.Hits) != 1 || res.Hits[0].ID != "a" {
			t.Fatalf("%s: got %+v, want the one document the filter keeps", tc.fusion, res.Hits)
		}
		h := res.Hits[0]
		if diff := h.Score - tc.want; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s: single hit scores %g, want %g; sources %+v", tc.fusion, h.Score, tc.want, h.Sources)
		}
		for _, s := range h.Sources {
			if s.Rank != 1 {
				t.Errorf("%s: %s ranks the single hit %d, want 1", tc.fusion, s.Retriever, s.Rank)
			}
		}
	}
	// The default fusion (min-max) gives the best match a positive score.
	res, err := e.Search(ctx, Request{Text: "road", Filter: []byte(`{"term":{"lang":"en"}}`), Retrievers: []string{"bm25", "dense"}, Vectors: vec(0.2, 0.9, 0.1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) != 1 || res.Hits[0].Score <= 0 {
		t.Errorf("default fusion: got %+v, want one hit scoring above 0", res.Hits)
	}
	// Each retriever's time is reported, within the search's.
	if len(res.RetrieverTook) != len(res.Retrievers) {
		t.Fatalf("RetrieverTook %v for retrievers %v", res.RetrieverTook, res.Retrievers)
	}
	for i, d := range res.RetrieverTook {
		if d <= 0 || d > res.Took {
			t.Errorf("%s took %v of the search's %v", res.Retrievers[i], d, res.Took)
		}
	}
}
