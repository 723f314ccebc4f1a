package server

import (
	"net/http"
	"net/url"
	"testing"
)

// TestSearchFacets: a search's facets answer with exact counts in the
// request's order, in the body and the query-string forms; a disjunctive
// facet counts its field as if its own filter clause were absent; bad
// facet requests are 400s that name the facet, the field or the
// parameter.
func TestSearchFacets(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(25)...) // d00..d24: lang en (13) and fr (12) alternating, year 2000..2024

	type facetJSON struct {
		Field   string `json:"field"`
		Kind    string `json:"kind"`
		Docs    int64  `json:"docs"`
		Missing int64  `json:"missing"`
		Values  []struct {
			Value any   `json:"value"`
			Count int64 `json:"count"`
		} `json:"values"`
		Buckets []struct {
			Key   string `json:"key"`
			Count int64  `json:"count"`
		} `json:"buckets"`
	}
	var res struct {
		Hits   []hitJSON   `json:"hits"`
		Facets []facetJSON `json:"facets"`
	}
	body := map[string]any{
		"text":   "fox",
		"filter": map[string]any{"and": []any{map[string]any{"term": map[string]any{"lang": "en"}}, map[string]any{"range": map[string]any{"year": map[string]any{"gte": 2010}}}}},
		"facets": []any{
			map[string]any{"field": "lang", "disjunctive": true},
			map[string]any{"field": "year", "ranges": []any{map[string]any{"to": 2015}, map[string]any{"from": 2015, "key": "recent"}}},
			map[string]any{"field": "year", "interval": 10},
		},
	}
	a.must(http.StatusOK, "POST", "/v1/collections/docs/search", body, &res)
	if len(res.Facets) != 3 {
		t.Fatalf("facets: %+v", res.Facets)
	}
	// lang, disjunctive: the years 2010..2024 in both languages.
	if f := res.Facets[0]; f.Field != "lang" || f.Kind != "values" || f.Docs != 15 || len(f.Values) != 2 || f.Values[0].Value != "en" || f.Values[0].Count != 8 || f.Values[1].Value != "fr" || f.Values[1].Count != 7 {
		t.Errorf("disjunctive lang facet: %+v", f)
	}
	// year, under the whole filter: en from 2010, 8 documents.
	if f := res.Facets[1]; f.Kind != "ranges" || f.Docs != 8 || len(f.Buckets) != 2 || f.Buckets[0].Key != "*-2015" || f.Buckets[0].Count != 3 || f.Buckets[1].Key != "recent" || f.Buckets[1].Count != 5 {
		t.Errorf("year ranges: %+v", f)
	}
	if f := res.Facets[2]; f.Kind != "histogram" || len(f.Buckets) != 2 || f.Buckets[0].Key != "2010" || f.Buckets[0].Count != 5 || f.Buckets[1].Key != "2020" || f.Buckets[1].Count != 3 {
		t.Errorf("year histogram: %+v", f)
	}

	// The query-string form, and the results scope: the first 4 fused
	// hits of "fox" are d24..d21.
	res.Facets = nil
	q := url.Values{"q": {"fox"}, "k": {"2"}, "facet": {"lang", "year:interval=5"}, "facet_scope": {"results"}, "facet_window": {"4"}}
	a.must(http.StatusOK, "GET", "/v1/collections/docs/search?"+q.Encode(), nil, &res)
	if len(res.Hits) != 2 || len(res.Facets) != 2 || res.Facets[0].Docs != 4 || len(res.Facets[0].Values) != 2 || res.Facets[0].Values[0].Count != 2 ||
		len(res.Facets[1].Buckets) != 1 || res.Facets[1].Buckets[0].Key != "2020" || res.Facets[1].Buckets[0].Count != 4 {
		t.Errorf("GET facets in the results scope: %+v", res)
	}
	// Without facets, none.
	res.Facets = nil
	a.must(http.StatusOK, "POST", "/v1/collections/docs/search", map[string]any{"text": "fox"}, &res)
	if res.Facets != nil {
		t.Errorf("a search without facets answered facets %+v", res.Facets)
	}

	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"facets": []any{map[string]any{"field": "text"}}}, `facets[0] (field "text")`, "text field")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"facets": []any{map[string]any{"field": "nope"}}}, `"nope"`)
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"facets": []any{map[string]any{"field": "year", "interval": -1}}}, `field "year"`, "interval")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"facets": []any{map[string]any{"field": "lang", "interval": 5}}}, `field "lang"`)
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"facet_scope": "everything"}, `facet scope "everything"`)
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", map[string]any{"facets": []any{map[string]any{"field": "lang", "top": 3}}}, `"top"`)
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/collections/docs/search?q=fox&facet=year:top=3", nil, "facet", `"top"`)
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/collections/docs/search?q=fox&facet=lang&facet_window=many", nil, "facet_window")
}
