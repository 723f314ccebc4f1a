package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/fusion"
	"github.com/tandemsearch/tandem/sparse"
)

// Facet scopes (Request.FacetScope): the documents a search's facets
// count. doc.go ("Facets") defines them.
const (
	// FacetScopeFilter counts every document the request's filter
	// matches, every document when it has none, whatever the text and
	// the retrievers. It is the default.
	FacetScopeFilter = "filter"
	// FacetScopeResults counts the first FacetWindow hits of the fused
	// ranking the page is cut from.
	FacetScopeResults = "results"
)

// Facet defaults and bounds. A request over a bound is refused with
// ErrBadRequest naming it, so that one request cannot allocate without
// limit: facets, their ranges and their sizes by their request, and a
// histogram by the buckets it would return.
const (
	// DefaultFacetSize is how many values a keyword, keywords or bool
	// facet lists when FacetRequest.Size is 0.
	DefaultFacetSize = 10
	// DefaultFacetWindow is how many fused hits the results scope counts
	// when Request.FacetWindow is 0 (raised to K+Offset): DefaultDepth,
	// what each retriever gives fusion by default.
	DefaultFacetWindow = DefaultDepth
	// MaxFacets bounds Request.Facets.
	MaxFacets = 32
	// MaxFacetSize bounds FacetRequest.Size.
	MaxFacetSize = 10_000
	// MaxFacetRanges bounds FacetRequest.Ranges.
	MaxFacetRanges = 1_000
	// MaxFacetBuckets bounds the non-empty buckets of one histogram: a
	// histogram that would have more fails, saying to widen its interval.
	MaxFacetBuckets = 10_000
)

// FacetRequest asks for one facet. A keyword, keywords or bool field gives
// its most frequent values; a number or date field gives the counts of
// Ranges, or a histogram of Interval (numbers) or DateInterval (dates).
type FacetRequest struct {
	// Field names a keyword, keywords, bool, number or date field.
	Field string `json:"field"`
	// Size is how many values a keyword, keywords or bool facet lists,
	// 1 to MaxFacetSize; 0 means DefaultFacetSize.
	Size int `json:"size,omitempty"`
	// MinCount leaves out the values and histogram buckets counted in
	// fewer documents; 0 means 1 (every one listed has a document).
	// Ranges are always all listed.
	MinCount int `json:"min_count,omitempty"`
	// Ranges are counted for a number or date field: each counts the
	// documents whose value v has From <= v < To (a missing bound is
	// open). Ranges may overlap.
	Ranges []FacetRange `json:"ranges,omitempty"`
	// Interval makes a number field's histogram: buckets
	// [k·Interval, (k+1)·Interval) for integers k.
	Interval float64 `json:"interval,omitempty"`
	// DateInterval makes a date field's histogram, in UTC: a calendar
	// unit, "minute", "hour", "day", "week" (from Monday), "month",
	// "quarter" or "year"; or a fixed length, a whole number of seconds
	// ("90s"), minutes ("15m"), hours ("12h") or days ("7d"), up to
	// 100,000 days, its buckets aligned to multiples of it since
	// 1970-01-01T00:00:00Z.
	DateInterval string `json:"date_interval,omitempty"`
	// Disjunctive counts the facet as if the request's filter did not
	// hold the field's own conditions: its top-level conjuncts (the
	// filter itself, or the clauses of its "and", nested ands
	// flattened) that refer to this field alone are dropped. A clause
	// that refers to other fields too is kept.
	Disjunctive bool `json:"disjunctive,omitempty"`
}

// FacetRange is one range of a range facet. From and To are numbers for
// a number field and dates (RFC 3339 or 2006-01-02) for a date field.
type FacetRange struct {
	// Key names the range in the result; "" means "<from>-<to>", with
	// "*" for an open bound.
	Key  string `json:"key,omitempty"`
	From any    `json:"from,omitempty"`
	To   any    `json:"to,omitempty"`
}

// Facet kinds (Facet.Kind).
const (
	FacetKindValues    = "values"
	FacetKindRanges    = "ranges"
	FacetKindHistogram = "histogram"
)

// Facet is one facet of a search result, in the order of
// Request.Facets. Counts are of documents: a keywords document holding a
// value counts once for it, however often it lists it.
type Facet struct {
	Field string `json:"field"`
	// Kind is "values", "ranges" or "histogram".
	Kind string `json:"kind"`
	// Docs is the number of documents the facet counted (its scope, with
	// the field's own conditions dropped when disjunctive); Missing is
	// how many of them have no value for the field.
	Docs    int64 `json:"docs"`
	Missing int64 `json:"missing"`
	// Values lists a values facet's values, most documents first, ties
	// by value (bytes ascending; false before true): at most Size of
	// them, each with at least MinCount documents. OtherValues is the
	// number of values left out, and Other their documents summed.
	Values      []FacetValue `json:"values,omitempty"`
	OtherValues int64        `json:"other_values,omitempty"`
	Other       int64        `json:"other,omitempty"`
	// Buckets are a range facet's ranges, in the request's order, or a
	// histogram's buckets with at least MinCount documents, ascending.
	Buckets []FacetBucket `json:"buckets,omitempty"`
}

// String describes the facet on one line: its field, the documents
// counted and those without the field, then each value or bucket with
// its count ("facet cat (120 documents, 3 without it): a 70, b 47, 1 more
// values in 3 documents").
func (f Facet) String() string {
	var parts []string
	for _, v := range f.Values {
		parts = append(parts, fmt.Sprintf("%v %d", v.Value, v.Count))
	}
	for _, b := range f.Buckets {
		parts = append(parts, fmt.Sprintf("%s %d", b.Key, b.Count))
	}
	if f.OtherValues > 0 {
		parts = append(parts, fmt.Sprintf("%d more values in %d documents", f.OtherValues, f.Other))
	}
	return fmt.Sprintf("facet %s (%d documents, %d without it): %s", f.Field, f.Docs, f.Missing, strings.Join(parts, ", "))
}

// FacetValue is one value of a values facet: a string, or a bool for a
// bool field.
type FacetValue struct {
	Value any   `json:"value"`
	Count int64 `json:"count"`
}

// FacetBucket is one range or histogram bucket: the documents whose
// value v has From <= v < To, From and To numbers (float64) for a number
// field and RFC 3339 strings for a date field, nil when open.
type FacetBucket struct {
	Key   string `json:"key"`
	From  any    `json:"from,omitempty"`
	To    any    `json:"to,omitempty"`
	Count int64  `json:"count"`
}

// FacetCounts are the exact counts behind one facet, over some documents,
// before its size and minimum count cut them. Counts over disjoint sets
// of documents add up (Add): the shards of a collection each count their
// own, and the coordinator adds them and finishes them (Plan.Facets), as
// one engine finishes its own.
type FacetCounts struct {
	Docs    int64 `json:"docs"`
	Missing int64 `json:"missing"`
	// Values counts every value of a values facet ("true" and "false"
	// for a bool field).
	Values map[string]int64 `json:"values,omitempty"`
	// Ranges counts each range of a range facet, in the request's order.
	Ranges []int64 `json:"ranges,omitempty"`
	// Buckets counts every non-empty histogram bucket by its number k:
	// the bucket starts at k·Interval, at the k-th DateInterval since
	// 1970-01-01T00:00:00Z, or for "week" at the k-th Monday since
	// 1969-12-29.
	Buckets map[int64]int64 `json:"buckets,omitempty"`
	// Overflow reports a histogram that stopped counting: it reached
	// more than MaxFacetBuckets buckets, or a value over 2^52 intervals
	// from 0. Plan.Facets refuses it, so that a shard's part is refused by
	// the coordinator with the error one engine gives.
	Overflow bool `json:"overflow,omitempty"`
}

// Add adds o's counts to c's.
func (c *FacetCounts) Add(o FacetCounts) {
	c.Docs += o.Docs
	c.Missing += o.Missing
	c.Overflow = c.Overflow || o.Overflow
	for v, n := range o.Values {
		if c.Values == nil {
			c.Values = map[string]int64{}
		}
		c.Values[v] += n
	}
	if len(c.Ranges) < len(o.Ranges) {
		c.Ranges = append(c.Ranges, make([]int64, len(o.Ranges)-len(c.Ranges))...)
	}
	for i, n := range o.Ranges {
		c.Ranges[i] += n
	}
	for k, n := range o.Buckets {
		if c.Buckets == nil {
			c.Buckets = map[int64]int64{}
		}
		c.Buckets[k] += n
	}
}

// facetPlan is a request's facets, checked and resolved.
type facetPlan struct {
	scope  string
	window int // the results scope's window; 0 for the filter scope
	specs  []facetSpec
	// groups share a filter: the request's own (groups[0], which may
	// have no facet) and each filter that disjunctive facets reduce it
	// to.
	groups []facetGroup
}

// facetGroup is the facets counted under one filter.
type facetGroup struct {
	filter filter.Expr // nil: every document
	own    bool        // the request's own filter
	facets []int       // indices into specs
}

// facetSpec is one checked FacetRequest.
type facetSpec struct {
	at       int // its index in Request.Facets
	req      FacetRequest
	typ      tandem.FieldType
	kind     string
	size     int
	minCount int
	ranges   []rangeSpec
	hist     histogram
}

// rangeSpec is one range, with its bounds as compared and as reported.
type rangeSpec struct {
	key          string
	from, to     any // float64 or RFC 3339 string; nil when open
	lo, hi       float64
	loN, hiN     int64
	hasLo, hasHi bool
}

// histogram is a histogram's interval: width for numbers; for dates a
// fixed length (nanos, offset) or a calendar unit of months (months 1,
// 3, 12).
type histogram struct {
	width  float64
	nanos  int64
	offset int64 // nanoseconds from 1970-01-01 to bucket 0's start
	months int
}

// facetWindow is the results scope's window for req, 0 for the filter
// scope or when the request is bad (which planFacets reports).
func facetWindow(req Request) int {
	if len(req.Facets) == 0 || req.FacetScope != FacetScopeResults {
		return 0
	}
	want := req.K + req.Offset
	if req.K == 0 {
		want += 10
	}
	w := req.FacetWindow
	if w == 0 {
		w = DefaultFacetWindow
	}
	w = max(w, want) // raised to the page, as every depth is
	if req.FacetWindow < 0 || w > maxK {
		return 0
	}
	return w
}

// planFacets checks req's facets against schema and groups them by the
// filter each counts under (fe is the request's, nil for none).
func planFacets(req Request, schema *tandem.Schema, fe filter.Expr) (*facetPlan, error) {
	// A scope or window without facets, or a window of the filter
	// scope, counts nothing and changes nothing: it is ignored, as a
	// depth for no retriever would be if it could be.
	switch req.FacetScope {
	case "", FacetScopeFilter, FacetScopeResults:
	default:
		return nil, fmt.Errorf("%w: facet scope %q (want %q or %q)", ErrBadRequest, req.FacetScope, FacetScopeFilter, FacetScopeResults)
	}
	if req.FacetWindow < 0 || req.FacetWindow > maxK {
		return nil, fmt.Errorf("%w: facet window %d: want 0 to %d (0 means max(%d, k+offset))", ErrBadRequest, req.FacetWindow, maxK, DefaultFacetWindow)
	}
	if len(req.Facets) == 0 {
		return nil, nil
	}
	if len(req.Facets) > MaxFacets {
		return nil, fmt.Errorf("%w: %d facets (limit %d)", ErrBadRequest, len(req.Facets), MaxFacets)
	}
	fp := &facetPlan{scope: cmp.Or(req.FacetScope, FacetScopeFilter)}
	if fp.scope == FacetScopeResults {
		if fp.window = facetWindow(req); fp.window == 0 {
			return nil, fmt.Errorf("%w: facet window %d: at least k+offset (%d) and at most %d", ErrBadRequest, req.FacetWindow, req.K+req.Offset, maxK)
		}
	}
	fp.groups = []facetGroup{{filter: fe, own: true}}
	conj := conjuncts(fe)
	var keys []string // of groups[1:], the conjuncts each drops
	for i, r := range req.Facets {
		s, err := checkFacet(i, r, schema)
		if err != nil {
			return nil, s.errorf("%w", err)
		}
		g := 0
		if r.Disjunctive {
			var kept []filter.Expr
			var key strings.Builder
			for j, c := range conj {
				if fs := filter.Fields(c); len(fs) == 1 && fs[0] == r.Field {
					fmt.Fprintf(&key, "%d,", j)
				} else {
					kept = append(kept, c)
				}
			}
			if key.Len() > 0 {
				g = slices.Index(keys, key.String()) + 1
				if g == 0 {
					var reduced filter.Expr
					switch len(kept) {
					case 0:
					case 1:
						reduced = kept[0]
					default:
						reduced = &filter.And{Exprs: kept}
					}
					fp.groups = append(fp.groups, facetGroup{filter: reduced})
					keys = append(keys, key.String())
					g = len(fp.groups) - 1
				}
			}
		}
		fp.groups[g].facets = append(fp.groups[g].facets, i)
		fp.specs = append(fp.specs, s)
	}
	return fp, nil
}

// conjuncts are e's top-level conjuncts: e, or the clauses of an and,
// nested ands flattened; none for no filter.
func conjuncts(e filter.Expr) []filter.Expr {
	if e == nil {
		return nil
	}
	a, ok := e.(*filter.And)
	if !ok {
		return []filter.Expr{e}
	}
	var out []filter.Expr
	for _, c := range a.Exprs {
		out = append(out, conjuncts(c)...)
	}
	return out
}

// checkFacet checks one facet request against schema; its errors name
// the parameter, and the caller the facet and field.
func checkFacet(at int, r FacetRequest, schema *tandem.Schema) (facetSpec, error) {
	s := facetSpec{at: at, req: r, size: r.Size, minCount: r.MinCount}
	f, ok := schema.Field(r.Field)
	if !ok {
		if r.Field == "" {
			return s, fmt.Errorf("no field given")
		}
		return s, fmt.Errorf("unknown field")
	}
	s.typ = f.Type
	numeric := f.Type == tandem.Number || f.Type == tandem.Date
	switch {
	case f.Type == tandem.Text:
		return s, fmt.Errorf("a text field has no facet; facets count keyword, keywords, bool, number and date fields")
	case r.Size < 0 || r.Size > MaxFacetSize:
		return s, fmt.Errorf("size %d: want 1 to %d (0 means %d)", r.Size, MaxFacetSize, DefaultFacetSize)
	case r.MinCount < 0:
		return s, fmt.Errorf("min_count %d: want at least 0", r.MinCount)
	case !numeric && (len(r.Ranges) > 0 || r.Interval != 0 || r.DateInterval != ""):
		return s, fmt.Errorf("ranges, interval and date_interval need a number or date field; %q is %s", r.Field, f.Type)
	case !numeric:
		s.kind = FacetKindValues
		if s.size == 0 {
			s.size = DefaultFacetSize
		}
		s.minCount = max(s.minCount, 1)
		return s, nil
	case r.Size != 0:
		return s, fmt.Errorf("size applies to keyword, keywords and bool fields; %q is %s (give ranges or an interval)", r.Field, f.Type)
	case f.Type == tandem.Number && r.DateInterval != "":
		return s, fmt.Errorf("date_interval needs a date field; %q is a number field (give interval)", r.Field)
	case f.Type == tandem.Date && r.Interval != 0:
		return s, fmt.Errorf("interval needs a number field; %q is a date field (give date_interval)", r.Field)
	}
	hasHist := r.Interval != 0 || r.DateInterval != ""
	switch {
	case len(r.Ranges) > 0 && hasHist:
		return s, fmt.Errorf("give ranges or an interval, not both")
	case len(r.Ranges) > MaxFacetRanges:
		return s, fmt.Errorf("%d ranges (limit %d)", len(r.Ranges), MaxFacetRanges)
	case len(r.Ranges) > 0:
		if r.MinCount != 0 {
			return s, fmt.Errorf("min_count applies to values and histograms; every range is listed")
		}
		s.kind = FacetKindRanges
		for j, rg := range r.Ranges {
			rs, err := checkRange(rg, f.Type)
			if err != nil {
				return s, fmt.Errorf("ranges[%d]: %w", j, err)
			}
			s.ranges = append(s.ranges, rs)
		}
		return s, nil
	case !hasHist:
		return s, fmt.Errorf("a %s field needs ranges or %s", f.Type, map[tandem.FieldType]string{tandem.Number: "an interval", tandem.Date: "a date_interval"}[f.Type])
	}
	s.kind = FacetKindHistogram
	s.minCount = max(s.minCount, 1)
	if f.Type == tandem.Number {
		if !(r.Interval > 0) || math.IsInf(r.Interval, 0) {
			return s, fmt.Errorf("interval %v: want a finite number > 0", r.Interval)
		}
		s.hist = histogram{width: r.Interval}
		return s, nil
	}
	h, err := parseDateInterval(r.DateInterval)
	if err != nil {
		return s, err
	}
	s.hist = h
	return s, nil
}

// maxFixedDays bounds a fixed date interval, so that its length in
// nanoseconds fits an int64 with every date's distance from 1970.
const maxFixedDays = 100_000

func parseDateInterval(v string) (histogram, error) {
	var h histogram
	const day = int64(24 * time.Hour)
	switch v {
	case "minute":
		h.nanos = int64(time.Minute)
	case "hour":
		h.nanos = int64(time.Hour)
	case "day":
		h.nanos = day
	case "week":
		h.nanos, h.offset = 7*day, -3*day // 1969-12-29 was a Monday
	case "month":
		h.months = 1
	case "quarter":
		h.months = 3
	case "year":
		h.months = 12
	default:
		bad := fmt.Errorf("date_interval %q: want minute, hour, day, week, month, quarter, year, or a whole number of s, m, h or d (\"15m\", \"7d\") up to %dd", v, maxFixedDays)
		if len(v) < 2 {
			return h, bad
		}
		unit := map[byte]int64{'s': int64(time.Second), 'm': int64(time.Minute), 'h': int64(time.Hour), 'd': day}[v[len(v)-1]]
		n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
		if unit == 0 || err != nil || n < 1 || v[0] == '+' || n > maxFixedDays*(day/unit) {
			return h, bad
		}
		h.nanos = n * unit
	}
	return h, nil
}

// checkRange checks one range of a facet on a field of type t.
func checkRange(r FacetRange, t tandem.FieldType) (rangeSpec, error) {
	rs := rangeSpec{key: r.Key}
	bound := func(name string, v any, f *float64, n *int64) (any, bool, error) {
		if v == nil {
			return nil, false, nil
		}
		if t == tandem.Number {
			x, ok := asFloat(v)
			if !ok || math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, false, fmt.Errorf("%s %v: want a finite number", name, v)
			}
			if x == 0 {
				x = 0 // -0 is 0
			}
			*f = x
			return x, true, nil
		}
		s, ok := v.(string)
		if !ok {
			return nil, false, fmt.Errorf("%s %v: want a date (RFC 3339 or 2006-01-02)", name, v)
		}
		tm, err := tandem.ParseDate(s)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", name, err)
		}
		if y := tm.Year(); y < 1678 || y > 2261 {
			return nil, false, fmt.Errorf("%s %q: outside the supported years 1678-2261", name, s)
		}
		*n = tm.UnixNano()
		return tandem.FormatDate(tm), true, nil
	}
	var err error
	if rs.from, rs.hasLo, err = bound("from", r.From, &rs.lo, &rs.loN); err != nil {
		return rs, err
	}
	if rs.to, rs.hasHi, err = bound("to", r.To, &rs.hi, &rs.hiN); err != nil {
		return rs, err
	}
	if rs.hasLo && rs.hasHi && ((t == tandem.Number && rs.lo >= rs.hi) || (t == tandem.Date && rs.loN >= rs.hiN)) {
		return rs, fmt.Errorf("from %v is not below to %v: the range is empty", r.From, r.To)
	}
	if rs.key == "" {
		label := func(v any) string {
			switch x := v.(type) {
			case nil:
				return "*"
			case float64:
				return strconv.FormatFloat(x, 'g', -1, 64)
			}
			return fmt.Sprint(v)
		}
		rs.key = label(rs.from) + "-" + label(rs.to)
	}
	return rs, nil
}

// asFloat reads a number as JSON decoding and Go callers give it.
func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// facetCounter counts the facets of one group in one scan of their
// scope (a sparse.ValueVisitor): each field's values go to every facet
// on it.
type facetCounter struct {
	specs  []*facetSpec
	counts []*FacetCounts
	fields []string
	on     [][]int // per field, the facets counting it
	seen   []bool  // per facet: the current document has a value
	with   []int64 // per facet: documents with a value
	// values facets count into slices, indexed by value through a map
	// that allocates a key once per distinct value.
	idx  []map[string]int
	vals [][]string
	ns   [][]int64
	// cal caches, per facet, the last month-based bucket: its number and
	// the nanoseconds it spans.
	cal []calBucket
}

type calBucket struct {
	k      int64
	lo, hi int64
	ok     bool
}

func newFacetCounter(specs []*facetSpec, counts []*FacetCounts) *facetCounter {
	c := &facetCounter{specs: specs, counts: counts, seen: make([]bool, len(specs)), with: make([]int64, len(specs)),
		idx: make([]map[string]int, len(specs)), vals: make([][]string, len(specs)), ns: make([][]int64, len(specs)), cal: make([]calBucket, len(specs))}
	for i, s := range specs {
		f := slices.Index(c.fields, s.req.Field)
		if f < 0 {
			f = len(c.fields)
			c.fields = append(c.fields, s.req.Field)
			c.on = append(c.on, nil)
		}
		c.on[f] = append(c.on[f], i)
		switch s.kind {
		case FacetKindValues:
			c.idx[i] = map[string]int{}
		case FacetKindRanges:
			counts[i].Ranges = make([]int64, len(s.ranges))
		case FacetKindHistogram:
			counts[i].Buckets = map[int64]int64{}
		}
	}
	return c
}

func (c *facetCounter) Doc() {
	clear(c.seen)
}

func (c *facetCounter) mark(i int) {
	if !c.seen[i] {
		c.seen[i] = true
		c.with[i]++
	}
}

func (c *facetCounter) Keyword(field int, v []byte) {
	for _, i := range c.on[field] {
		c.mark(i)
		if j, ok := c.idx[i][string(v)]; ok {
			c.ns[i][j]++
			continue
		}
		key := string(v)
		c.idx[i][key] = len(c.ns[i])
		c.vals[i] = append(c.vals[i], key)
		c.ns[i] = append(c.ns[i], 1)
	}
}

// boolValues are a bool field's values as a values facet counts them.
var boolValues = [2][]byte{[]byte("false"), []byte("true")}

func (c *facetCounter) Bool(field int, v bool) {
	if v {
		c.Keyword(field, boolValues[1])
	} else {
		c.Keyword(field, boolValues[0])
	}
}

func (c *facetCounter) Number(field int, v float64) {
	for _, i := range c.on[field] {
		c.mark(i)
		s, n := c.specs[i], c.counts[i]
		if s.kind == FacetKindRanges {
			for j, r := range s.ranges {
				if (!r.hasLo || v >= r.lo) && (!r.hasHi || v < r.hi) {
					n.Ranges[j]++
				}
			}
			continue
		}
		k, ok := numberBucket(v, s.hist.width)
		if !ok {
			n.Overflow = true
			continue
		}
		c.bucket(i, k)
	}
}

func (c *facetCounter) Date(field int, v int64) {
	for _, i := range c.on[field] {
		c.mark(i)
		s, n := c.specs[i], c.counts[i]
		if s.kind == FacetKindRanges {
			for j, r := range s.ranges {
				if (!r.hasLo || v >= r.loN) && (!r.hasHi || v < r.hiN) {
					n.Ranges[j]++
				}
			}
			continue
		}
		if s.hist.months == 0 {
			c.bucket(i, floorDiv(v-s.hist.offset, s.hist.nanos))
			continue
		}
		cb := &c.cal[i]
		if !cb.ok || v < cb.lo || v >= cb.hi {
			t := time.Unix(0, v).UTC()
			k := floorDiv((int64(t.Year())-1970)*12+int64(t.Month()-1), int64(s.hist.months))
			start, end := monthBucket(k, s.hist.months)
			*cb = calBucket{k: k, lo: start.UnixNano(), hi: nanosOrMax(end), ok: true}
		}
		c.bucket(i, cb.k)
	}
}

// bucket counts a value in histogram i's bucket k, unless the histogram
// overflowed: then it stops growing.
func (c *facetCounter) bucket(i int, k int64) {
	n := c.counts[i]
	if n.Overflow {
		return
	}
	if _, ok := n.Buckets[k]; !ok && len(n.Buckets) == MaxFacetBuckets {
		n.Overflow = true
		return
	}
	n.Buckets[k]++
}

// Err is nil: an overflowing histogram is refused when it is finished,
// as a shard's part is.
func (c *facetCounter) Err() error { return nil }

// finish stores the scan's counts: n documents visited.
func (c *facetCounter) finish(n uint64) {
	for i, s := range c.specs {
		cnt := c.counts[i]
		cnt.Docs = int64(n)
		cnt.Missing = int64(n) - c.with[i]
		if s.kind == FacetKindValues {
			cnt.Values = make(map[string]int64, len(c.vals[i]))
			for j, v := range c.vals[i] {
				cnt.Values[v] = c.ns[i][j]
			}
		}
	}
}

func tooManyBuckets(s *facetSpec) error {
	iv := s.req.DateInterval
	if s.typ == tandem.Number {
		iv = strconv.FormatFloat(s.hist.width, 'g', -1, 64)
	}
	return s.errorf("the histogram of interval %s has more than %d buckets, or a value over 2^52 intervals from 0; choose a larger interval, or ranges", iv, MaxFacetBuckets)
}

// errorf is a bad request's error naming the facet and its field.
func (s *facetSpec) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: facets[%d] (field %q): %w", ErrBadRequest, s.at, s.req.Field, fmt.Errorf(format, args...))
}

// maxBucket bounds a number histogram's bucket numbers, so that the
// bounds k·width and (k+1)·width of every bucket are distinct float64s.
const maxBucket = 1 << 52

// numberBucket is the number k of v's bucket, [k·width, (k+1)·width) as
// computed in float64, so that the bucket reported holds v.
func numberBucket(v, width float64) (int64, bool) {
	k := math.Floor(v / width)
	if math.Abs(k) > maxBucket-2 {
		return 0, false
	}
	for range 2 {
		switch {
		case v < k*width:
			k--
		case v >= (k+1)*width:
			k++
		}
	}
	return int64(k), true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// monthBucket is the span of bucket k of months-long buckets since
// January 1970.
func monthBucket(k int64, months int) (time.Time, time.Time) {
	m := k * int64(months)
	start := time.Date(1970+int(floorDiv(m, 12)), time.Month(m-floorDiv(m, 12)*12+1), 1, 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, months, 0)
}

// maxTime is the last instant whose UnixNano is defined.
var maxTime = time.Unix(0, math.MaxInt64).UTC()

func nanosOrMax(t time.Time) int64 {
	if t.After(maxTime) {
		return math.MaxInt64
	}
	return t.UnixNano()
}

// bucketBounds are histogram bucket k's bounds as a FacetBucket reports
// them, and its key.
func (s *facetSpec) bucketBounds(k int64) (key string, from, to any) {
	h := s.hist
	if s.typ == tandem.Number {
		lo, hi := float64(k)*h.width, float64(k+1)*h.width
		if lo == 0 {
			lo = 0
		}
		return strconv.FormatFloat(lo, 'g', -1, 64), lo, hi
	}
	var start, end time.Time
	if h.months > 0 {
		start, end = monthBucket(k, h.months)
	} else {
		// In seconds, which do not overflow: k·nanos is within a bucket
		// of a date's nanoseconds since 1970, and every fixed length is
		// whole seconds.
		sec := h.nanos / int64(time.Second)
		start = time.Unix(h.offset/int64(time.Second)+k*sec, 0).UTC()
		end = start.Add(time.Duration(h.nanos))
	}
	f := tandem.FormatDate(start)
	return f, f, tandem.FormatDate(end)
}

// finish turns a facet's counts into the result's facet.
func (s *facetSpec) finish(c FacetCounts) (Facet, error) {
	f := Facet{Field: s.req.Field, Kind: s.kind, Docs: c.Docs, Missing: c.Missing}
	switch s.kind {
	case FacetKindValues:
		type vc struct {
			v string
			n int64
		}
		all := make([]vc, 0, len(c.Values))
		for v, n := range c.Values {
			all = append(all, vc{v, n})
		}
		slices.SortFunc(all, func(a, b vc) int {
			if x := cmp.Compare(b.n, a.n); x != 0 {
				return x
			}
			return strings.Compare(a.v, b.v) // "false" < "true"
		})
		f.Values = []FacetValue{}
		for _, x := range all {
			if len(f.Values) == s.size || x.n < int64(s.minCount) {
				f.OtherValues++
				f.Other += x.n
				continue
			}
			var v any = x.v
			if s.typ == tandem.Bool {
				v = x.v == "true"
			}
			f.Values = append(f.Values, FacetValue{Value: v, Count: x.n})
		}
	case FacetKindRanges:
		f.Buckets = make([]FacetBucket, len(s.ranges))
		for j, r := range s.ranges {
			f.Buckets[j] = FacetBucket{Key: r.key, From: r.from, To: r.to}
			if j < len(c.Ranges) {
				f.Buckets[j].Count = c.Ranges[j]
			}
		}
	case FacetKindHistogram:
		if c.Overflow || len(c.Buckets) > MaxFacetBuckets {
			return f, tooManyBuckets(s)
		}
		ks := make([]int64, 0, len(c.Buckets))
		for k, n := range c.Buckets {
			if n >= int64(s.minCount) {
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		f.Buckets = make([]FacetBucket, len(ks))
		for j, k := range ks {
			key, from, to := s.bucketBounds(k)
			f.Buckets[j] = FacetBucket{Key: key, From: from, To: to, Count: c.Buckets[k]}
		}
	}
	return f, nil
}

// FacetScope is the scope of the request's facets, "" when it has none.
func (p *Plan) FacetScope() string {
	if p.facets == nil {
		return ""
	}
	return p.facets.scope
}

// FacetWindow is the number of fused hits the results scope counts, 0
// for the filter scope or a request without facets.
func (p *Plan) FacetWindow() int {
	if p.facets == nil {
		return 0
	}
	return p.facets.window
}

// FacetGroup is one ranking whose window facets of the results scope
// count (Plan.FacetGroups).
type FacetGroup struct {
	// Request is the search to rank: the request with the group's
	// filter and only the group's facets. Its plan is Plan.
	Request Request
	Plan    *Plan
	// Facets are the indices of its facets in the request's Facets.
	Facets []int
	// Own is true for the request's own ranking (its filter unchanged).
	Own bool
}

// FacetGroups lists the rankings a request's facets of the results scope
// count the window of: the request's own first, then one per filter that
// disjunctive facets reduce the request's to. Shard.Facets counts each
// group's Request over the ids of its window. It is nil for the filter
// scope and without facets.
func (p *Plan) FacetGroups() ([]FacetGroup, error) {
	if p.facets == nil || p.facets.scope != FacetScopeResults {
		return nil, nil
	}
	var out []FacetGroup
	for _, g := range p.facets.groups {
		if len(g.facets) == 0 {
			continue
		}
		req := p.req
		req.Facets = make([]FacetRequest, len(g.facets))
		for j, i := range g.facets {
			req.Facets[j] = p.req.Facets[i]
		}
		gp := p
		if !g.own {
			req.Filter = nil
			if g.filter != nil {
				b, err := filter.Encode(g.filter)
				if err != nil {
					return nil, err
				}
				req.Filter = b
			}
			gp = p.withFilter(g.filter)
		}
		out = append(out, FacetGroup{Request: req, Plan: gp, Facets: g.facets, Own: g.own})
	}
	return out, nil
}

// withFilter is p ranking under fe instead of its filter.
func (p *Plan) withFilter(fe filter.Expr) *Plan {
	q := *p
	q.filter = fe
	return &q
}

// Facets finishes the request's facets from their counts: parts[i][j] is
// the counts of facet j over the i-th of disjoint sets of documents (a
// shard's), which add up.
func (p *Plan) Facets(parts [][]FacetCounts) ([]Facet, error) {
	if p.facets == nil {
		return nil, nil
	}
	out := make([]Facet, len(p.facets.specs))
	for j := range p.facets.specs {
		var sum FacetCounts
		for _, part := range parts {
			if len(part) != len(p.facets.specs) {
				return nil, fmt.Errorf("engine: facets: %d counts for %d facets", len(part), len(p.facets.specs))
			}
			sum.Add(part[j])
		}
		f, err := p.facets.specs[j].finish(sum)
		if err != nil {
			return nil, err
		}
		out[j] = f
	}
	return out, nil
}

// countFacets counts the facets idx of fp over scope into counts, in one
// scan of the scope's doc values.
func (e *Engine) countFacets(ctx context.Context, schema *tandem.Schema, fp *facetPlan, idx []int, scope sparse.ScanScope, counts []FacetCounts) error {
	specs := make([]*facetSpec, len(idx))
	cs := make([]*FacetCounts, len(idx))
	for j, i := range idx {
		specs[j], cs[j] = &fp.specs[i], &counts[i]
	}
	c := newFacetCounter(specs, cs)
	n, err := e.sparse.ScanValues(ctx, schema, scope, c.fields, c)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("engine: facets: %w", err)
	}
	c.finish(n)
	return nil
}

// searchFacets counts a search's facets: all is the fused ranking the
// page is cut from (at least the results scope's window long when the
// retrievers found that many).
func (e *Engine) searchFacets(ctx context.Context, p *Plan, all []fusion.Hit) ([]Facet, error) {
	fp := p.facets
	counts := make([]FacetCounts, len(fp.specs))
	for _, g := range fp.groups {
		if len(g.facets) == 0 {
			continue
		}
		scope := sparse.ScanScope{Filter: g.filter}
		if fp.scope == FacetScopeResults {
			win := all
			if !g.own {
				gp := p.withFilter(g.filter)
				rets, err := e.run(ctx, gp, nil)
				if err != nil {
					return nil, err
				}
				lists := make([][]fusion.Item, len(rets))
				for i, r := range rets {
					lists[i] = r.hits
				}
				if win, err = gp.FuseAll(lists); err != nil {
					return nil, err
				}
			}
			win = win[:min(len(win), fp.window)]
			scope.Docs = make([]uint64, len(win))
			for i, h := range win {
				scope.Docs[i] = h.Doc
			}
		}
		if err := e.countFacets(ctx, p.schema, fp, g.facets, scope, counts); err != nil {
			return nil, err
		}
	}
	return p.Facets([][]FacetCounts{counts})
}

// Facets counts the facets of req on this shard, over the documents of
// ids that exist and match the request's filter (each disjunctive
// facet's reduced filter), or, when ids is nil, over the facet scope
// "filter". For the results scope, the coordinator counts each of
// Plan.FacetGroups with its Request over the ids of its window.
func (s *Shard) Facets(ctx context.Context, req Request, ids []string) ([]FacetCounts, error) {
	e := s.e
	p, err := e.enterPlan(req)
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	if p.facets == nil {
		return nil, nil
	}
	var nums []uint64
	if ids != nil {
		nums = make([]uint64, 0, len(ids))
		for _, id := range ids {
			n, ok, err := e.st.Lookup(id)
			if err != nil {
				return nil, fmt.Errorf("engine: facets: %q: %w", id, err)
			}
			if ok {
				nums = append(nums, n)
			}
		}
	} else if p.facets.scope != FacetScopeFilter {
		return nil, fmt.Errorf("%w: facets of scope %q count listed documents: give their ids", ErrBadRequest, p.facets.scope)
	}
	counts := make([]FacetCounts, len(p.facets.specs))
	for _, g := range p.facets.groups {
		if len(g.facets) == 0 {
			continue
		}
		if err := e.countFacets(ctx, p.schema, p.facets, g.facets, sparse.ScanScope{Filter: g.filter, Docs: nums}, counts); err != nil {
			return nil, err
		}
	}
	return counts, nil
}
