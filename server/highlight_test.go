package server

import (
	"net/http"
	"testing"
)

// TestSearchHighlight: a search's highlight member gives each hit its
// fragments with BM25's analysed terms marked (characters, no markup),
// the query-string form's highlight=true too, and bad highlight requests
// are 400s that name the parameter or field.
func TestSearchHighlight(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(3)...)
	a.upsert("docs", `{"_id":"zebra","title":"Éclat: zebra crossings","text":"Zebras were crossing the road; a zebra crossed.","lang":"en","year":1999}`)

	type fragment struct {
		Text  string `json:"text"`
		Start int    `json:"start"`
		End   int    `json:"end"`
		Marks []struct {
			Start int    `json:"start"`
			End   int    `json:"end"`
			Term  string `json:"term"`
		} `json:"marks"`
	}
	var res struct {
		Hits []struct {
			ID         string `json:"id"`
			Highlights *struct {
				Fields map[string][]fragment `json:"fields"`
			} `json:"highlights"`
		} `json:"hits"`
	}
	a.must(http.StatusOK, "POST", "/v1/collections/docs/search", map[string]any{"text": "crossing zebra", "highlight": map[string]any{"fields": []string{"text"}, "fragments": 1}}, &res)
	if len(res.Hits) != 1 || res.Hits[0].Highlights == nil || len(res.Hits[0].Highlights.Fields["text"]) != 1 || res.Hits[0].Highlights.Fields["title"] != nil {
		t.Fatalf("highlighted search: %+v", res)
	}
	fr := res.Hits[0].Highlights.Fields["text"][0]
	var marked []string
	for _, m := range fr.Marks {
		marked = append(marked, string([]rune(fr.Text)[m.Start:m.End]))
	}
	// The English analyzer stems "crossing", "crossed" and "Zebras" to
	// the query's terms; "the" and "a" are stop words.
	if want := []string{"Zebras", "crossing", "zebra", "crossed"}; len(marked) != len(want) || marked[0] != want[0] || marked[1] != want[1] || marked[2] != want[2] || marked[3] != want[3] {
		t.Errorf("marked words %q, want %q (fragment %+v)", marked, want, fr)
	}

	// Without the member, no highlights.
	res.Hits = nil
	a.must(http.StatusOK, "POST", "/v1/collections/docs/search", map[string]any{"text": "zebra"}, &res)
	if len(res.Hits) != 1 || res.Hits[0].Highlights != nil {
		t.Errorf("search without highlight: %+v", res)
	}
	// The query-string form, characters counted past "é".
	res.Hits = nil
	a.must(http.StatusOK, "GET", "/v1/collections/docs/search?q=zebra&highlight=true", nil, &res)
	if len(res.Hits) != 1 || res.Hits[0].Highlights == nil {
		t.Fatalf("GET highlight=true: %+v", res)
	}
	if tf := res.Hits[0].Highlights.Fields["title"]; len(tf) != 1 || len(tf[0].Marks) != 1 || string([]rune(tf[0].Text)[tf[0].Marks[0].Start:tf[0].Marks[0].End]) != "zebra" || tf[0].Marks[0].Start != 7 {
		t.Errorf("title fragment %+v: want zebra marked at character 7", tf)
	}

	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"text": "zebra", "highlight": map[string]any{"fields": []string{"lang"}}}, `"lang"`, "text fields")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"text": "zebra", "highlight": map[string]any{"fields": []string{"nope"}}}, `"nope"`)
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"text": "zebra", "highlight": map[string]any{"fragment_size": -1}}, "highlight.fragment_size -1")
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", map[string]any{"text": "zebra", "highlight": map[string]any{"size": 10}}, `"size"`)
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", map[string]any{"text": "zebra", "highlight": true}, `"highlight"`)
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/collections/docs/search?q=zebra&highlight=yes", nil, "highlight")
}
