package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

// facetModel is an external model whose vectors the facet tests make up,
// so that dense and late-interaction searches run without an encoder.
var facetModel = tandem.Model{Name: "ext", Dense: true, Dim: 8, Late: true, TokenDim: 4, Similarity: tandem.Dot, External: true}

func facetVectors(r *rand.Rand) map[string]tandem.Vectors {
	v := tandem.Vectors{Dense: make([]float32, facetModel.Dim)}
	for i := range v.Dense {
		v.Dense[i] = float32(r.NormFloat64())
	}
	for range 1 + r.IntN(4) {
		row := make([]float32, facetModel.TokenDim)
		for i := range row {
			row[i] = float32(r.NormFloat64())
		}
		v.Tokens = append(v.Tokens, row)
	}
	return map[string]tandem.Vectors{facetModel.Name: v}
}

// facetCollection is a collection of n propDoc documents with made-up
// vectors, some replaced and some deleted, and its stored fields by id.
func facetCollection(t testing.TB, r *rand.Rand, n int) (*Engine, map[string]map[string]any) {
	ctx := context.Background()
	schema := propSchema()
	schema.Models = []tandem.Model{facetModel}
	e := openT(t, t.TempDir(), &Options{Schema: schema, BatchSize: 97, NoSync: true})
	docs := make([]tandem.Doc, n)
	for i := range docs {
		docs[i] = propDoc(r, i)
		docs[i].Vectors = facetVectors(r)
	}
	if _, err := e.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var again []tandem.Doc
	for i := 3; i < n; i += 41 {
		d := propDoc(r, i)
		d.Vectors = facetVectors(r)
		again = append(again, d)
	}
	if _, err := e.Index(ctx, again); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Delete(ctx, []string{"d010", fmt.Sprintf("d%03d", n/2)}); err != nil {
		t.Fatal(err)
	}
	stored := map[string]map[string]any{}
	if err := e.Shard().Store().ScanDocs(ctx, func(_ uint64, d tandem.Doc) error {
		stored[d.ID] = d.Fields
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return e, stored
}

// randomFacets returns 1 to 4 random facet requests over propSchema's
// fields.
func randomFacets(r *rand.Rand) []FacetRequest {
	var out []FacetRequest
	for range 1 + r.IntN(4) {
		f := FacetRequest{Disjunctive: r.IntN(2) == 0}
		switch r.IntN(7) {
		case 0, 1:
			f.Field = []string{"lang", "tags", "open"}[r.IntN(3)]
			f.Size = []int{0, 1, 2, 3, 20}[r.IntN(5)]
			f.MinCount = []int{0, 0, 1, 2, 15}[r.IntN(5)]
		case 2:
			f.Field = "year"
			for range 1 + r.IntN(4) {
				rg := FacetRange{}
				lo := 1985 + r.IntN(35)
				if r.IntN(4) > 0 {
					rg.From = float64(lo)
				}
				if r.IntN(4) > 0 {
					rg.To = float64(lo + 1 + r.IntN(15))
				}
				if r.IntN(3) == 0 {
					rg.Key = fmt.Sprint("r", r.IntN(100))
				}
				f.Ranges = append(f.Ranges, rg)
			}
		case 3:
			f.Field = "published"
			for range 1 + r.IntN(3) {
				rg := FacetRange{}
				lo := 2000 + r.IntN(24)
				if r.IntN(4) > 0 {
					rg.From = fmt.Sprintf("%d-%02d-01", lo, 1+r.IntN(12))
				}
				if r.IntN(4) > 0 {
					rg.To = fmt.Sprintf("%d-01-01T00:00:00+01:00", lo+1+r.IntN(5))
				}
				f.Ranges = append(f.Ranges, rg)
			}
		case 4:
			f.Field = "year"
			f.Interval = []float64{1, 2.5, 5, 0.7, 10, 3}[r.IntN(6)]
			f.MinCount = []int{0, 0, 2}[r.IntN(3)]
		default:
			f.Field = "published"
			f.DateInterval = []string{"month", "quarter", "year", "week", "day", "hour", "30d", "12h", "90m", "7d"}[r.IntN(10)]
			f.MinCount = []int{0, 0, 2}[r.IntN(3)]
		}
		out = append(out, f)
	}
	return out
}

// TestFacetsProperty checks facet counts against a brute-force count over
// the stored documents, for random documents, filters, retrievers (bm25,
// dense, late interaction and their fusions, with made-up vectors),
// scopes, windows, pages and facets, disjunctive or not. The brute force
// takes a filter scope's documents with filter.Match and a results
// scope's from the same search's hits with K set to the window; it drops
// a disjunctive facet's own clauses from the filter's JSON itself.
func TestFacetsProperty(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	e, stored := facetCollection(t, r, 300)
	schema := e.Schema()
	modes := [][]string{{"bm25"}, {"dense"}, {"late"}, {"bm25", "dense"}, {"bm25", "dense", "late"}}
	iters := 200
	if testing.Short() {
		iters = 50
	}
	seen := map[string]int{}
	for it := range iters {
		req := Request{
			Retrievers: modes[r.IntN(len(modes))],
			K:          1 + r.IntN(15),
			Offset:     r.IntN(8),
			Facets:     randomFacets(r),
			IDsOnly:    r.IntN(2) == 0,
			Vectors:    facetVectors(r),
		}
		if r.IntN(4) > 0 {
			req.Text = propWords[r.IntN(len(propWords))] + " " + propWords[r.IntN(len(propWords))]
		}
		switch r.IntN(4) {
		case 0: // no filter
		case 1:
			req.Filter, _ = json.Marshal(propFilter(r, 0))
		default: // a conjunction, whose clauses disjunctive facets drop
			var kids []any
			for range 1 + r.IntN(3) {
				kids = append(kids, propFilter(r, 2))
			}
			req.Filter, _ = json.Marshal(map[string]any{"and": kids})
		}
		if r.IntN(2) == 0 {
			req.FacetScope = FacetScopeResults
			if r.IntN(2) == 0 {
				req.FacetWindow = req.K + req.Offset + r.IntN(60)
			}
		} else if r.IntN(2) == 0 {
			req.FacetScope = FacetScopeFilter
		}
		res, err := e.Search(ctx, req)
		if err != nil {
			t.Fatalf("iteration %d: %s: %v", it, describe(req), err)
		}
		want := make([]Facet, len(req.Facets))
		for i, f := range req.Facets {
			fj := req.Filter
			if f.Disjunctive {
				if fj = dropOwnClauses(t, req.Filter, f.Field); !slices.Equal(fj, req.Filter) {
					seen["disjunctive facets dropping clauses"]++
				}
			}
			var docs []map[string]any
			if req.FacetScope == FacetScopeResults {
				w := req.FacetWindow
				if w == 0 {
					w = max(DefaultFacetWindow, req.K+req.Offset)
				}
				plain := req
				plain.Filter, plain.K, plain.Offset, plain.Facets, plain.FacetScope, plain.FacetWindow, plain.IDsOnly = fj, w, 0, nil, "", 0, true
				win, err := e.Search(ctx, plain)
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range win.Hits {
					docs = append(docs, stored[h.ID])
				}
				if string(fj) == string(req.Filter) {
					// The page is cut from the window's ranking.
					page := win.Hits[min(req.Offset, len(win.Hits)):min(req.Offset+req.K, len(win.Hits))]
					if strings.Join(ids(page), " ") != strings.Join(ids(res.Hits), " ") {
						t.Fatalf("iteration %d: %s: page %v, but the window's ranking has %v there", it, describe(req), ids(res.Hits), ids(page))
					}
				}
			} else {
				var fe filter.Expr
				if len(fj) > 0 {
					if fe, err = filter.Parse(fj); err != nil {
						t.Fatal(err)
					}
					if err := filter.Check(fe, schema); err != nil {
						t.Fatal(err)
					}
				}
				for _, d := range stored {
					if fe == nil || filter.Match(fe, schema, d) {
						docs = append(docs, d)
					}
				}
			}
			want[i] = bruteFacet(t, f, schema, docs)
		}
		gj, _ := json.Marshal(res.Facets)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) {
			t.Fatalf("iteration %d: %s:\nfacets %s\nwant   %s", it, describe(req), gj, wj)
		}
		// The invariants doc.go states.
		for i, f := range res.Facets {
			var sum int64
			for _, v := range f.Values {
				sum += v.Count
			}
			for _, b := range f.Buckets {
				sum += b.Count
			}
			typ := map[string]string{"lang": "keyword", "open": "bool", "year": "number", "published": "date"}[f.Field]
			switch {
			case f.Kind == FacetKindValues && typ != "" && sum+f.Other+f.Missing != f.Docs,
				f.Kind == FacetKindHistogram && req.Facets[i].MinCount <= 1 && sum+f.Missing != f.Docs:
				t.Fatalf("iteration %d: %s: facet %d: counts %d, other %d, missing %d, of %d documents", it, describe(req), i, sum, f.Other, f.Missing, f.Docs)
			}
		}
		for _, f := range want {
			if f.Docs > 0 && (len(f.Values) > 0 || slices.ContainsFunc(f.Buckets, func(b FacetBucket) bool { return b.Count > 0 })) {
				seen[f.Kind+" "+req.FacetScope]++
			}
		}
	}
	t.Logf("non-empty facets compared: %v", seen)
	for _, k := range []string{"values ", "values results", "ranges ", "ranges results", "histogram filter", "histogram results", "disjunctive facets dropping clauses"} {
		if seen[k] < iters/20 {
			t.Errorf("only %d non-empty %q facets in %d searches: the generator misses them", seen[k], k, iters)
		}
	}
}

func describe(req Request) string {
	fs, _ := json.Marshal(req.Facets)
	return fmt.Sprintf("text %q %v k=%d offset=%d filter %s scope %q window %d facets %s", req.Text, req.Retrievers, req.K, req.Offset, req.Filter, req.FacetScope, req.FacetWindow, fs)
}

// dropOwnClauses drops from a JSON filter its top-level conjuncts (the
// filter, or its and's clauses, nested ands flattened) that refer to
// field alone.
func dropOwnClauses(t *testing.T, fj []byte, field string) []byte {
	if len(fj) == 0 {
		return nil
	}
	var f map[string]any
	if err := json.Unmarshal(fj, &f); err != nil {
		t.Fatal(err)
	}
	var flat func(map[string]any) []map[string]any
	flat = func(m map[string]any) []map[string]any {
		kids, ok := m["and"].([]any)
		if !ok {
			return []map[string]any{m}
		}
		var out []map[string]any
		for _, k := range kids {
			out = append(out, flat(k.(map[string]any))...)
		}
		return out
	}
	var fields func(m map[string]any, into map[string]bool)
	fields = func(m map[string]any, into map[string]bool) {
		for op, v := range m {
			switch op {
			case "and", "or":
				for _, k := range v.([]any) {
					fields(k.(map[string]any), into)
				}
			case "not":
				fields(v.(map[string]any), into)
			case "exists":
				into[v.(string)] = true
			default:
				for name := range v.(map[string]any) {
					into[name] = true
				}
			}
		}
	}
	var keep []any
	dropped := false
	for _, c := range flat(f) {
		in := map[string]bool{}
		fields(c, in)
		if len(in) == 1 && in[field] {
			dropped = true
			continue
		}
		keep = append(keep, c)
	}
	if !dropped {
		return fj
	}
	switch len(keep) {
	case 0:
		return nil
	case 1:
		b, _ := json.Marshal(keep[0])
		return b
	}
	b, _ := json.Marshal(map[string]any{"and": keep})
	return b
}

// bruteFacet counts facet f over docs from their stored fields, by the
// definitions in FacetRequest and Facet.
func bruteFacet(t *testing.T, f FacetRequest, schema *tandem.Schema, docs []map[string]any) Facet {
	fd, _ := schema.Field(f.Field)
	out := Facet{Field: f.Field, Docs: int64(len(docs))}
	minCount := int64(max(f.MinCount, 1))
	date := func(v any) time.Time {
		tm, err := tandem.ParseDate(v.(string))
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	switch {
	case len(f.Ranges) > 0:
		out.Kind = FacetKindRanges
		for _, d := range docs {
			if d[f.Field] == nil {
				out.Missing++
			}
		}
		for _, rg := range f.Ranges {
			b := FacetBucket{Key: rg.Key}
			in := func(v any) bool {
				if fd.Type == tandem.Number {
					x := v.(float64)
					return (rg.From == nil || x >= rg.From.(float64)) && (rg.To == nil || x < rg.To.(float64))
				}
				x := date(v)
				return (rg.From == nil || !x.Before(date(rg.From))) && (rg.To == nil || x.Before(date(rg.To)))
			}
			label := func(v any) string {
				switch {
				case v == nil:
					return "*"
				case fd.Type == tandem.Number:
					return strconv.FormatFloat(v.(float64), 'g', -1, 64)
				}
				return tandem.FormatDate(date(v))
			}
			if b.Key == "" {
				b.Key = label(rg.From) + "-" + label(rg.To)
			}
			if rg.From != nil {
				b.From = rg.From
				if fd.Type == tandem.Date {
					b.From = tandem.FormatDate(date(rg.From))
				}
			}
			if rg.To != nil {
				b.To = rg.To
				if fd.Type == tandem.Date {
					b.To = tandem.FormatDate(date(rg.To))
				}
			}
			for _, d := range docs {
				if v := d[f.Field]; v != nil && in(v) {
					b.Count++
				}
			}
			out.Buckets = append(out.Buckets, b)
		}
	case f.Interval != 0 || f.DateInterval != "":
		out.Kind = FacetKindHistogram
		type bucket struct {
			from, to any
			key      string
			sort     float64
			n        int64
		}
		buckets := map[string]*bucket{}
		for _, d := range docs {
			v := d[f.Field]
			if v == nil {
				out.Missing++
				continue
			}
			var b bucket
			if fd.Type == tandem.Number {
				x, w := v.(float64), f.Interval
				// The bucket [k·w, (k+1)·w) that holds x, searched for.
				k := int64(x/w) - 3
				for !(float64(k)*w <= x && x < float64(k+1)*w) {
					k++
				}
				lo := float64(k) * w
				b = bucket{from: lo, to: float64(k+1) * w, key: strconv.FormatFloat(lo, 'g', -1, 64), sort: lo}
			} else {
				tm := date(v)
				var start, end time.Time
				day := func(tm time.Time) time.Time { return time.Date(tm.Year(), tm.Month(), tm.Day(), 0, 0, 0, 0, time.UTC) }
				switch f.DateInterval {
				case "hour":
					start = tm.Truncate(time.Hour)
					end = start.Add(time.Hour)
				case "day":
					start = day(tm)
					end = start.AddDate(0, 0, 1)
				case "week":
					start = day(tm).AddDate(0, 0, -((int(tm.Weekday()) + 6) % 7))
					end = start.AddDate(0, 0, 7)
				case "month":
					start = time.Date(tm.Year(), tm.Month(), 1, 0, 0, 0, 0, time.UTC)
					end = start.AddDate(0, 1, 0)
				case "quarter":
					start = time.Date(tm.Year(), (tm.Month()-1)/3*3+1, 1, 0, 0, 0, 0, time.UTC)
					end = start.AddDate(0, 3, 0)
				case "year":
					start = time.Date(tm.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
					end = start.AddDate(1, 0, 0)
				default: // a fixed length, aligned to multiples since 1970
					n, _ := strconv.Atoi(f.DateInterval[:len(f.DateInterval)-1])
					unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}[f.DateInterval[len(f.DateInterval)-1]]
					w := int64(time.Duration(n) * unit / time.Second)
					sec := tm.Unix()
					k := sec / w
					if sec < 0 && sec%w != 0 {
						k--
					}
					start = time.Unix(k*w, 0).UTC()
					end = start.Add(time.Duration(n) * unit)
				}
				b = bucket{from: tandem.FormatDate(start), to: tandem.FormatDate(end), key: tandem.FormatDate(start), sort: float64(start.Unix())}
			}
			if buckets[b.key] == nil {
				buckets[b.key] = &b
			}
			buckets[b.key].n++
		}
		var all []*bucket
		for _, b := range buckets {
			if b.n >= minCount {
				all = append(all, b)
			}
		}
		slices.SortFunc(all, func(a, b *bucket) int { return cmp.Compare(a.sort, b.sort) })
		for _, b := range all {
			out.Buckets = append(out.Buckets, FacetBucket{Key: b.key, From: b.from, To: b.to, Count: b.n})
		}
	default:
		out.Kind = FacetKindValues
		counts := map[string]int64{}
		for _, d := range docs {
			var vals []string
			switch v := d[f.Field].(type) {
			case nil:
			case bool:
				vals = []string{strconv.FormatBool(v)}
			default:
				vals = slices.Compact(slices.Sorted(slices.Values(tandem.Strings(v))))
			}
			if len(vals) == 0 {
				out.Missing++
			}
			for _, v := range vals {
				counts[v]++
			}
		}
		type vc struct {
			v string
			n int64
		}
		var all []vc
		for v, n := range counts {
			all = append(all, vc{v, n})
		}
		slices.SortFunc(all, func(a, b vc) int {
			if a.n != b.n {
				return cmp.Compare(b.n, a.n)
			}
			return strings.Compare(a.v, b.v)
		})
		size := f.Size
		if size == 0 {
			size = DefaultFacetSize
		}
		out.Values = []FacetValue{}
		for _, x := range all {
			if len(out.Values) == size || x.n < minCount {
				out.OtherValues++
				out.Other += x.n
				continue
			}
			var v any = x.v
			if fd.Type == tandem.Bool {
				v = x.v == "true"
			}
			out.Values = append(out.Values, FacetValue{Value: v, Count: x.n})
		}
	}
	return out
}

// TestFacetErrors: each bad facet request is refused with ErrBadRequest,
// before any work, by an error naming the facet, its field and the
// parameter.
func TestFacetErrors(t *testing.T) {
	ctx := context.Background()
	e, _ := facetCollection(t, rand.New(rand.NewPCG(1, 1)), 40)
	many := make([]FacetRequest, MaxFacets+1)
	for i := range many {
		many[i] = FacetRequest{Field: "lang"}
	}
	manyRanges := make([]FacetRange, MaxFacetRanges+1)
	for i := range manyRanges {
		manyRanges[i] = FacetRange{From: float64(i)}
	}
	tests := []struct {
		name string
		req  Request
		want []string
	}{
		{"unknown field", Request{Facets: []FacetRequest{{Field: "lang"}, {Field: "colour"}}}, []string{`facets[1] (field "colour")`, "unknown field"}},
		{"no field", Request{Facets: []FacetRequest{{}}}, []string{"facets[0]", "no field given"}},
		{"text field", Request{Facets: []FacetRequest{{Field: "title"}}}, []string{`field "title"`, "text field"}},
		{"size", Request{Facets: []FacetRequest{{Field: "tags", Size: MaxFacetSize + 1}}}, []string{`field "tags"`, "size 10001", "1 to 10000"}},
		{"negative size", Request{Facets: []FacetRequest{{Field: "tags", Size: -1}}}, []string{`field "tags"`, "size -1"}},
		{"min count", Request{Facets: []FacetRequest{{Field: "open", MinCount: -2}}}, []string{`field "open"`, "min_count -2"}},
		{"ranges on keyword", Request{Facets: []FacetRequest{{Field: "lang", Ranges: []FacetRange{{From: 1.0}}}}}, []string{`field "lang"`, "need a number or date field", "keyword"}},
		{"interval on bool", Request{Facets: []FacetRequest{{Field: "open", Interval: 2}}}, []string{`field "open"`, "need a number or date field", "bool"}},
		{"number without ranges", Request{Facets: []FacetRequest{{Field: "year"}}}, []string{`field "year"`, "needs ranges or an interval"}},
		{"size on number", Request{Facets: []FacetRequest{{Field: "year", Size: 3, Interval: 1}}}, []string{`field "year"`, "size applies to keyword"}},
		{"date interval on number", Request{Facets: []FacetRequest{{Field: "year", DateInterval: "month"}}}, []string{`field "year"`, "date_interval needs a date field"}},
		{"interval on date", Request{Facets: []FacetRequest{{Field: "published", Interval: 5}}}, []string{`field "published"`, "interval needs a number field"}},
		{"both", Request{Facets: []FacetRequest{{Field: "year", Interval: 5, Ranges: []FacetRange{{To: 3.0}}}}}, []string{`field "year"`, "ranges or an interval, not both"}},
		{"zero interval", Request{Facets: []FacetRequest{{Field: "year", Interval: -1}}}, []string{`field "year"`, "interval -1", "> 0"}},
		{"infinite interval", Request{Facets: []FacetRequest{{Field: "year", Interval: math.Inf(1)}}}, []string{`field "year"`, "interval +Inf"}},
		{"bad date interval", Request{Facets: []FacetRequest{{Field: "published", DateInterval: "fortnight"}}}, []string{`field "published"`, `date_interval "fortnight"`}},
		{"fractional date interval", Request{Facets: []FacetRequest{{Field: "published", DateInterval: "1.5h"}}}, []string{`date_interval "1.5h"`}},
		{"zero date interval", Request{Facets: []FacetRequest{{Field: "published", DateInterval: "0d"}}}, []string{`date_interval "0d"`}},
		{"huge date interval", Request{Facets: []FacetRequest{{Field: "published", DateInterval: "100001d"}}}, []string{`date_interval "100001d"`, "up to 100000d"}},
		{"range bound type", Request{Facets: []FacetRequest{{Field: "year", Ranges: []FacetRange{{From: "2001"}}}}}, []string{`field "year"`, "ranges[0]", "from 2001", "finite number"}},
		{"range date", Request{Facets: []FacetRequest{{Field: "published", Ranges: []FacetRange{{To: "2020-01-01"}, {From: "yesterday"}}}}}, []string{`field "published"`, "ranges[1]", "from", `"yesterday"`}},
		{"range date years", Request{Facets: []FacetRequest{{Field: "published", Ranges: []FacetRange{{To: "3000-01-01"}}}}}, []string{"ranges[0]", "1678-2261"}},
		{"empty range", Request{Facets: []FacetRequest{{Field: "year", Ranges: []FacetRange{{From: 5.0, To: 5.0}}}}}, []string{`field "year"`, "ranges[0]", "not below", "empty"}},
		{"min count on ranges", Request{Facets: []FacetRequest{{Field: "year", MinCount: 1, Ranges: []FacetRange{{To: 3.0}}}}}, []string{"min_count applies to values and histograms"}},
		{"too many ranges", Request{Facets: []FacetRequest{{Field: "year", Ranges: manyRanges}}}, []string{`field "year"`, "1001 ranges", "limit 1000"}},
		{"too many facets", Request{Facets: many}, []string{"33 facets", "limit 32"}},
		{"scope", Request{Facets: []FacetRequest{{Field: "lang"}}, FacetScope: "everything"}, []string{`facet scope "everything"`}},
		{"window over the limit", Request{Facets: []FacetRequest{{Field: "lang"}}, FacetScope: FacetScopeResults, FacetWindow: maxK + 1}, []string{"facet window 100001", "want 0 to 100000"}},
		{"negative window", Request{FacetWindow: -1}, []string{"facet window -1"}},
		{"scope without facets", Request{FacetScope: "everything"}, []string{`facet scope "everything"`}},
		{"buckets too far from 0", Request{Facets: []FacetRequest{{Field: "year", Interval: 1e-300}}}, []string{`facets[0] (field "year")`, "interval 1e-300", "2^52 intervals from 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Search(ctx, tc.req)
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("err = %v, want ErrBadRequest", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestFacetBucketLimit: a histogram that would have more than
// MaxFacetBuckets buckets stops growing and is refused when finished,
// naming the facet, field and interval: one engine's counts, and counts
// that add up (a cluster's shards') to more than the limit together.
func TestFacetBucketLimit(t *testing.T) {
	schema := propSchema()
	for _, fr := range []FacetRequest{{Field: "year", Interval: 0.5}, {Field: "published", DateInterval: "hour"}} {
		fp, err := planFacets(Request{K: 10, Facets: []FacetRequest{{Field: "tags"}, fr}}, schema, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := &Plan{facets: fp}
		refused := func(what string, parts [][]FacetCounts) {
			t.Helper()
			_, err := p.Facets(parts)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), fmt.Sprintf("facets[1] (field %q)", fr.Field)) || !strings.Contains(err.Error(), "more than 10000 buckets") {
				t.Errorf("%s: %s: %v, want a bad request naming the facet", fr.Field, what, err)
			}
		}
		counts := make([]FacetCounts, 2)
		c := newFacetCounter([]*facetSpec{&fp.specs[1]}, []*FacetCounts{&counts[1]})
		for i := range 3 * MaxFacetBuckets {
			c.Doc()
			if fr.Interval != 0 {
				c.Number(0, float64(i))
			} else {
				c.Date(0, int64(i)*int64(time.Hour))
			}
		}
		if !counts[1].Overflow || len(counts[1].Buckets) != MaxFacetBuckets {
			t.Errorf("%s: overflow %v with %d buckets after %d values", fr.Field, counts[1].Overflow, len(counts[1].Buckets), 3*MaxFacetBuckets)
		}
		refused("one engine", [][]FacetCounts{counts})
		// Two halves under the limit that exceed it together.
		half := func(from int64) []FacetCounts {
			b := map[int64]int64{}
			for k := from; k < from+MaxFacetBuckets/2+1; k++ {
				b[k] = 1
			}
			return []FacetCounts{{}, {Docs: MaxFacetBuckets/2 + 1, Buckets: b}}
		}
		if _, err := p.Facets([][]FacetCounts{half(0)}); err != nil {
			t.Fatalf("%s: one half: %v", fr.Field, err)
		}
		refused("two halves", [][]FacetCounts{half(0), half(MaxFacetBuckets)})
		refused("a shard's overflow", [][]FacetCounts{half(0), {{}, {Overflow: true}}})
	}
}

// TestNumberBucket: the bucket numberBucket gives a value holds it, as
// its bounds are computed in float64, for widths and values where
// value/width rounds across an integer.
func TestNumberBucket(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	widths := []float64{0.1, 0.3, 0.7, 1e-3, 1.0 / 3, 2.5, 1e6, 1e-9}
	for range 200_000 {
		w := widths[r.IntN(len(widths))]
		v := float64(r.IntN(2000)-1000) * w * (1 + (r.Float64()-0.5)*1e-15)
		if r.IntN(3) == 0 {
			v = math.Nextafter(float64(r.IntN(200)-100)*w, math.Inf(2*r.IntN(2)-1))
		}
		k, ok := numberBucket(v, w)
		if !ok || !(float64(k)*w <= v && v < float64(k+1)*w) {
			t.Fatalf("numberBucket(%v, %v) = %d, %v: [%v, %v) does not hold it", v, w, k, ok, float64(k)*w, float64(k+1)*w)
		}
	}
	if _, ok := numberBucket(1e300, 1); ok {
		t.Error("a value 1e300 intervals from 0 has a bucket")
	}
}

// TestFacetWindowRaisedAndIgnored: a results window below the page is
// raised to it, as every depth is; a scope or window without facets, and
// a window of the filter scope, change nothing.
func TestFacetWindowRaisedAndIgnored(t *testing.T) {
	ctx := context.Background()
	e, _ := facetCollection(t, rand.New(rand.NewPCG(1, 1)), 40)
	page, err := e.Search(ctx, Request{K: 15})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Search(ctx, Request{K: 10, Offset: 5, Facets: []FacetRequest{{Field: "lang"}}, FacetScope: FacetScopeResults, FacetWindow: 14})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Facets) != 1 || res.Facets[0].Docs != int64(len(page.Hits)) {
		t.Errorf("window 14 under a page to 15: facets %+v, want %d documents counted", res.Facets, len(page.Hits))
	}
	filterScope, err := e.Search(ctx, Request{Facets: []FacetRequest{{Field: "lang"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []Request{
		{FacetScope: FacetScopeResults, FacetWindow: 50},
		{FacetWindow: 99_999},
		{Facets: []FacetRequest{{Field: "lang"}}, FacetWindow: 50},
	} {
		got, err := e.Search(ctx, req)
		if err != nil {
			t.Errorf("%+v: %v", req, err)
			continue
		}
		if len(req.Facets) == 0 && got.Facets != nil {
			t.Errorf("%+v: facets %+v without facets asked", req, got.Facets)
		}
		if len(req.Facets) > 0 && fmt.Sprint(got.Facets) != fmt.Sprint(filterScope.Facets) {
			t.Errorf("%+v: facets %+v, want the filter scope's %+v", req, got.Facets, filterScope.Facets)
		}
	}
}
