package engine

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseFacet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want FacetRequest
	}{
		{"lang", FacetRequest{Field: "lang"}},
		{"lang:size=20,disjunctive", FacetRequest{Field: "lang", Size: 20, Disjunctive: true}},
		{"lang:disjunctive=false,min_count=3", FacetRequest{Field: "lang", MinCount: 3}},
		{"year:interval=2.5", FacetRequest{Field: "year", Interval: 2.5}},
		{"published:date_interval=month", FacetRequest{Field: "published", DateInterval: "month"}},
		{"year:ranges=..2000|2000..2010|-5..", FacetRequest{Field: "year", Ranges: []FacetRange{{To: 2000.0}, {From: 2000.0, To: 2010.0}, {From: -5.0}}}},
		{"published:ranges=2020-01-01..2021-01-01", FacetRequest{Field: "published", Ranges: []FacetRange{{From: "2020-01-01", To: "2021-01-01"}}}},
	} {
		got, err := ParseFacet(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFacet(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "want FIELD"},
		{":size=3", "want FIELD"},
		{"lang:size=ten", `size="ten"`},
		{"lang:top=3", `unknown option "top"`},
		{"year:ranges=2000", `range "2000": want FROM..TO`},
		{"lang:disjunctive=maybe", `disjunctive="maybe"`},
	} {
		if _, err := ParseFacet(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFacet(%q) error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestParseFields(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]float64
		err  string
	}{
		{"", nil, ""},
		{"title", map[string]float64{"title": 0}, ""},
		{"title=2, text", map[string]float64{"title": 2, "text": 0}, ""},
		{"title=0", nil, `field "title": boost "0" is not a positive number`},
		{"title=x", nil, `boost "x"`},
		{",text", nil, `empty field name in ",text"`},
	} {
		got, err := ParseFields(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseFields(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFields(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseWeights(t *testing.T) {
	if got, err := ParseWeights("bm25=1, dense:m=2.5,late=0"); err != nil || !reflect.DeepEqual(got, map[string]float64{"bm25": 1, "dense:m": 2.5, "late": 0}) {
		t.Errorf("ParseWeights = %v, %v", got, err)
	}
	if got, err := ParseWeights(""); got != nil || err != nil {
		t.Errorf("ParseWeights(\"\") = %v, %v", got, err)
	}
	for _, bad := range []string{"bm25", "=1", "bm25=-1", "bm25=x"} {
		if _, err := ParseWeights(bad); err == nil || !strings.Contains(err.Error(), "want retriever=weight with a weight >= 0") {
			t.Errorf("ParseWeights(%q) error %v", bad, err)
		}
	}
}
