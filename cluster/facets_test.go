package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// TestFacetsEquivalence indexes the same documents into one engine and
// into a 3-node cluster as 3 shards of one replica (every shard's part
// goes over HTTP but this node's), BM25 only, with every facetable field
// type, and checks that random searches' facets (values, ranges and
// histograms, disjunctive or not, over both scopes and windows) count
// alike: always for the filter scope, and for the results scope when both
// rank the same documents into every window (tied scores at a window's
// cut may keep different ones). A bad facet request is refused with
// ErrBadRequest naming the field.
func TestFacetsEquivalence(t *testing.T) {
	ctx := testtime.Context(t)
	schema := &tandem.Schema{Strict: true, Fields: []tandem.Field{
		{Name: "text", Type: tandem.Text},
		{Name: "group", Type: tandem.Keyword}, {Name: "tags", Type: tandem.Keywords},
		{Name: "year", Type: tandem.Number}, {Name: "day", Type: tandem.Date}, {Name: "open", Type: tandem.Bool}}}
	schema.Fill()
	r := rand.New(rand.NewPCG(3, 30))
	words := strings.Fields("amber basalt cedar delta ember fjord granite harbor iris juniper")
	doc := func(i int) tandem.Doc {
		var w []string
		for range 3 + r.IntN(12) {
			w = append(w, words[r.IntN(len(words))])
		}
		f := map[string]any{"text": strings.Join(w, " ") + fmt.Sprint(" n", i)}
		if r.IntN(6) > 0 {
			f["group"] = []string{"red", "green", "blue", "grey"}[r.IntN(4)]
		}
		if n := r.IntN(4); n > 0 {
			var tags []string
			for range n {
				tags = append(tags, []string{"a", "b", "c", "d", "e"}[r.IntN(5)])
			}
			f["tags"] = tags
		}
		if r.IntN(6) > 0 {
			f["year"] = float64(1950 + r.IntN(60))
		}
		if r.IntN(6) > 0 {
			f["day"] = tandem.FormatDate(time.Date(1990+r.IntN(30), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), 0, 0, 0, time.UTC))
		}
		if r.IntN(6) > 0 {
			f["open"] = r.IntN(2) == 0
		}
		return tandem.Doc{ID: fmt.Sprintf("doc%03d", i), Fields: f}
	}
	docs := make([]tandem.Doc, 300)
	for i := range docs {
		docs[i] = doc(i)
	}
	var again []tandem.Doc
	for i := 0; i < len(docs); i += 13 {
		again = append(again, doc(i))
	}
	deleted := []string{"doc007", "doc100", "doc299"}

	single, err := engine.Open(t.TempDir(), &engine.Options{Schema: schema, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	nodes := testCluster(t, 3, engine.Options{NoSync: true})
	if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "f", Shards: 3, Replicas: 1, Schema: schema}); err != nil {
		t.Fatal(err)
	}
	pos := Position{}
	for k, batch := range [][]tandem.Doc{docs[:150], docs[150:], again} {
		if _, err := single.Index(ctx, batch); err != nil {
			t.Fatal(err)
		}
		res, err := nodes[k%3].Index(ctx, "f", batch)
		if err != nil {
			t.Fatal(err)
		}
		pos.Merge(res.Position)
	}
	if _, err := single.Delete(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	res, err := nodes[1].Delete(ctx, "f", deleted)
	if err != nil {
		t.Fatal(err)
	}
	pos.Merge(res.Position)

	filters := []string{"", `{"term":{"group":"red"}}`, `{"terms":{"tags":["a","b"]}}`,
		`{"and":[{"terms":{"group":["red","blue"]}},{"range":{"year":{"gte":1970}}},{"not":{"term":{"open":false}}}]}`,
		`{"and":[{"range":{"day":{"gte":"2000-01-01"}}},{"or":[{"term":{"group":"grey"}},{"term":{"tags":"e"}}]}]}`}
	facets := []engine.FacetRequest{
		{Field: "group"}, {Field: "group", Disjunctive: true, Size: 2}, {Field: "tags", MinCount: 3},
		{Field: "open", Disjunctive: true},
		{Field: "year", Ranges: []engine.FacetRange{{To: 1970.0}, {From: 1965.0, To: 1990.0}, {From: 1990.0, Key: "late"}}},
		{Field: "year", Interval: 10, Disjunctive: true}, {Field: "day", DateInterval: "year"},
		{Field: "day", DateInterval: "quarter", Disjunctive: true},
		{Field: "day", Ranges: []engine.FacetRange{{From: "1995-06-01", To: "2010-01-01"}}, Disjunctive: true},
	}
	compared, tied := map[string]int{}, 0
	for i := range 80 {
		req := engine.Request{K: 1 + r.IntN(10), Offset: r.IntN(5), Filter: []byte(filters[r.IntN(len(filters))])}
		for range 1 + r.IntN(4) {
			req.Facets = append(req.Facets, facets[r.IntN(len(facets))])
		}
		if r.IntN(4) > 0 {
			req.Text = words[r.IntN(len(words))] + " " + words[r.IntN(len(words))]
		}
		// The results scope, with text: without, BM25 ties every
		// document and the windows are cut from ties.
		if req.Text != "" && r.IntN(2) == 0 {
			req.FacetScope = engine.FacetScopeResults
			if r.IntN(2) == 0 {
				req.FacetWindow = req.K + req.Offset + r.IntN(40)
			}
		}
		want, err := single.Search(ctx, req)
		if err != nil {
			t.Fatalf("search %d: %v", i, err)
		}
		got, err := nodes[i%3].Search(ctx, "f", req, &SearchOptions{MinPosition: pos})
		if err != nil {
			t.Fatalf("search %d through %s: %v", i, nodes[i%3].ID(), err)
		}
		if req.FacetScope != "" && !sameWindows(t, ctx, single, nodes[i%3], "f", req, pos) {
			tied++
			continue
		}
		gj, _ := json.Marshal(got.Facets)
		wj, _ := json.Marshal(want.Facets)
		if len(want.Facets) != len(req.Facets) || string(gj) != string(wj) {
			fj, _ := json.Marshal(req.Facets)
			t.Fatalf("search %d (text %q, filter %s, scope %q, window %d, facets %s):\ncluster %s\nengine  %s", i, req.Text, req.Filter, req.FacetScope, req.FacetWindow, fj, gj, wj)
		}
		compared[req.FacetScope]++
	}
	t.Logf("facets compared by scope: %v; %d left out for a tie at a window's cut", compared, tied)
	if compared[""] < 20 || compared[engine.FacetScopeResults] < 10 {
		t.Errorf("too few searches compared: %v", compared)
	}

	// A bad facet request is refused before any shard works, naming the
	// field and the parameter.
	_, err = nodes[2].Search(ctx, "f", engine.Request{Facets: []engine.FacetRequest{{Field: "year", Interval: -3}}}, nil)
	if !errors.Is(err, engine.ErrBadRequest) || !strings.Contains(err.Error(), `field "year"`) || !strings.Contains(err.Error(), "interval -3") {
		t.Errorf("bad facet request: %v", err)
	}
	// A histogram the shards find too fine is refused by the coordinator
	// as one engine refuses it, whether the shards answer over HTTP or
	// not.
	fine := engine.Request{Facets: []engine.FacetRequest{{Field: "tags"}, {Field: "day", DateInterval: "1s", Disjunctive: true}, {Field: "year", Interval: 1e-300}}}
	_, want := single.Search(ctx, fine)
	for _, nd := range nodes {
		_, err := nd.Search(ctx, "f", fine, &SearchOptions{MinPosition: pos})
		if !errors.Is(want, engine.ErrBadRequest) || !errors.Is(err, engine.ErrBadRequest) || err.Error() != want.Error() || !strings.Contains(err.Error(), `facets[2] (field "year")`) {
			t.Errorf("too fine a histogram through %s: %v; one engine: %v", nd.ID(), err, want)
		}
	}
}
