package sparse

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/numeric"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

// Compile turns a checked filter into a Bleve query that matches exactly
// the documents filter.Match accepts. Numbers and dates become inclusive or
// exclusive numeric ranges, keywords become term and prefix queries, and
// exists uses the internal field listing each document's fields.
//
// Compile checks ctx at every node, and each clause of the query checks
// the search's context as Bleve builds its searcher and as the searcher
// advances (guarded), so that a filter's work stops when its search's
// context is done: Bleve's own searchers never look at it, and its
// collector only between matches.
func Compile(ctx context.Context, e filter.Expr, schema *tandem.Schema) (query.Query, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q, err := compile(ctx, e, schema)
	if err != nil {
		return nil, err
	}
	switch e.(type) {
	case *filter.And, *filter.Or, *filter.Not:
		return q, nil // their clauses are guarded
	}
	return guarded{q}, nil
}

func compile(ctx context.Context, e filter.Expr, schema *tandem.Schema) (query.Query, error) {
	switch x := e.(type) {
	case *filter.Term:
		f, err := fieldOf(schema, x.Field)
		if err != nil {
			return nil, err
		}
		return equals(f, x.Value)
	case *filter.Terms:
		f, err := fieldOf(schema, x.Field)
		if err != nil {
			return nil, err
		}
		qs := make([]query.Query, 0, len(x.Values))
		for _, v := range x.Values {
			q, err := equals(f, v)
			if err != nil {
				return nil, err
			}
			qs = append(qs, q)
		}
		return query.NewDisjunctionQuery(qs), nil
	case *filter.Range:
		f, err := fieldOf(schema, x.Field)
		if err != nil {
			return nil, err
		}
		lo, loIncl, hi, hiIncl := x.Bounds()
		return rangeQuery(f, lo, hi, loIncl, hiIncl)
	case *filter.Prefix:
		return &prefixQuery{field: x.Field, prefix: x.Prefix}, nil
	case *filter.Exists:
		q := query.NewTermQuery(x.Field)
		q.SetField(existsField)
		return q, nil
	case *filter.And:
		if len(x.Exprs) == 0 {
			return query.NewMatchAllQuery(), nil
		}
		qs, err := compileAll(ctx, x.Exprs, schema)
		if err != nil {
			return nil, err
		}
		return query.NewConjunctionQuery(qs), nil
	case *filter.Or:
		if len(x.Exprs) == 0 {
			return query.NewMatchNoneQuery(), nil
		}
		qs, err := compileAll(ctx, x.Exprs, schema)
		if err != nil {
			return nil, err
		}
		return query.NewDisjunctionQuery(qs), nil
	case *filter.Not:
		q, err := Compile(ctx, x.Expr, schema)
		if err != nil {
			return nil, err
		}
		return query.NewBooleanQuery([]query.Query{guarded{query.NewMatchAllQuery()}}, nil, []query.Query{q}), nil
	}
	return nil, fmt.Errorf("sparse: unknown filter expression %T", e)
}

func compileAll(ctx context.Context, es []filter.Expr, schema *tandem.Schema) ([]query.Query, error) {
	qs := make([]query.Query, len(es))
	for i, e := range es {
		q, err := Compile(ctx, e, schema)
		if err != nil {
			return nil, err
		}
		qs[i] = q
	}
	return qs, nil
}

func fieldOf(schema *tandem.Schema, name string) (tandem.Field, error) {
	f, ok := schema.Field(name)
	if !ok {
		return f, &filter.Error{Path: name, Msg: "unknown field"}
	}
	return f, nil
}

func equals(f tandem.Field, v filter.Value) (query.Query, error) {
	switch f.Type {
	case tandem.Keyword, tandem.Keywords:
		s, ok := v.(string)
		if !ok {
			break
		}
		q := query.NewTermQuery(s)
		q.SetField(f.Name)
		return q, nil
	case tandem.Bool:
		b, ok := v.(bool)
		if !ok {
			break
		}
		q := query.NewBoolFieldQuery(b)
		q.SetField(f.Name)
		return q, nil
	case tandem.Number, tandem.Date:
		return rangeQuery(f, v, v, true, true)
	}
	return nil, &filter.Error{Path: f.Name, Msg: fmt.Sprintf("value %v does not suit a %s field (was the filter checked?)", v, f.Type)}
}

// Dates are indexed as int64 nanoseconds; bounds outside that range are
// clamped so that a filter on year 1 or 9999 still means "open".
var (
	minDate = query.MinRFC3339CompatibleTime
	maxDate = query.MaxRFC3339CompatibleTime
)

// numericRange is Bleve's numeric range query on field, split in two where
// Bleve would otherwise take hours. Bleve's range searcher (v2.6.1)
// enumerates the prefix-coded terms of its coarsest range byte by byte,
// though they carry 7 bits a byte: when that range crosses a point where
// several of a term's characters carry (0 in its int64 space above all,
// where a narrow date range around 1970 lands), the enumeration visits up
// to 256^k byte strings for k carried characters.
// Split at the highest bit where the bounds differ, each half lies in one
// block aligned on that bit and reaches its edge, so its coarsest range
// stays inside an aligned block and carries at most one character.
func numericRange(field string, min, max *float64, minIncl, maxIncl bool) query.Query {
	lo, hi := int64Bounds(min, max, minIncl, maxIncl)
	if lo >= hi {
		q := query.NewNumericRangeInclusiveQuery(min, max, &minIncl, &maxIncl)
		q.SetField(field)
		return q
	}
	h := 63 - bits.LeadingZeros64(uint64(lo^hi))
	mid := hi >> h << h // lo < mid <= hi
	incl := true
	part := func(a, b int64) query.Query {
		fa, fb := numeric.Int64ToFloat64(a), numeric.Int64ToFloat64(b)
		q := query.NewNumericRangeInclusiveQuery(&fa, &fb, &incl, &incl)
		q.SetField(field)
		return q
	}
	return query.NewDisjunctionQuery([]query.Query{part(lo, mid-1), part(mid, hi)})
}

// int64Bounds returns the inclusive bounds of a numeric range query in
// Bleve's int64 space (numeric.Float64ToInt64), as Bleve's numeric range
// searcher reads the query's: a nil bound is an infinity, and an
// exclusive bound moves one step inward. The range is empty when lo >
// hi.
func int64Bounds(min, max *float64, minIncl, maxIncl bool) (lo, hi int64) {
	lo, hi = numeric.Float64ToInt64(math.Inf(-1)), numeric.Float64ToInt64(math.Inf(1))
	if min != nil {
		lo = numeric.Float64ToInt64(*min)
	}
	if max != nil {
		hi = numeric.Float64ToInt64(*max)
	}
	if !minIncl && lo != math.MaxInt64 {
		lo++
	}
	if !maxIncl && hi != math.MinInt64 {
		hi--
	}
	return lo, hi
}

// plusZero maps -0 to +0. Bleve's numeric terms order -0 below +0, while
// filter.Match, like Go, holds them equal: numbers are indexed and
// compared as +0 so that the three agree.
func plusZero(n float64) float64 {
	if n == 0 {
		return 0
	}
	return n
}

func rangeQuery(f tandem.Field, lo, hi filter.Value, loIncl, hiIncl bool) (query.Query, error) {
	min, max, err := rangeFloats(f, lo, hi)
	if err != nil {
		return nil, err
	}
	return numericRange(f.Name, min, max, loIncl, hiIncl), nil
}

// rangeFloats returns the bounds of a range of a number or date field
// (nil for an open one) as the floats of Bleve's numeric range query: a
// number itself (-0 as +0), a date the float whose sortable bits are its
// nanoseconds, clamped to the dates Bleve can index.
func rangeFloats(f tandem.Field, lo, hi filter.Value) (min, max *float64, err error) {
	switch f.Type {
	case tandem.Number:
		if lo != nil {
			n, ok := lo.(float64)
			if !ok {
				return nil, nil, &filter.Error{Path: f.Name, Msg: "range bound is not a number"}
			}
			n = plusZero(n)
			min = &n
		}
		if hi != nil {
			n, ok := hi.(float64)
			if !ok {
				return nil, nil, &filter.Error{Path: f.Name, Msg: "range bound is not a number"}
			}
			n = plusZero(n)
			max = &n
		}
		if min == nil && max == nil {
			inf := math.Inf(-1)
			min = &inf
		}
		return min, max, nil
	case tandem.Date:
		var start, end time.Time
		parse := func(v filter.Value) (time.Time, error) {
			s, ok := v.(string)
			if !ok {
				return time.Time{}, &filter.Error{Path: f.Name, Msg: "range bound is not a date"}
			}
			t, err := tandem.ParseDate(s)
			if err != nil {
				return time.Time{}, &filter.Error{Path: f.Name, Msg: err.Error()}
			}
			if t.Before(minDate) {
				t = minDate
			}
			if t.After(maxDate) {
				t = maxDate
			}
			return t, nil
		}
		if lo != nil {
			if start, err = parse(lo); err != nil {
				return nil, nil, err
			}
		} // a zero start is open

		if hi != nil {
			if end, err = parse(hi); err != nil {
				return nil, nil, err
			}
		} // a zero end is open

		// Bleve indexes a date as the float whose sortable bits are its
		// nanoseconds (numeric.Int64ToFloat64), and a DateRangeQuery is
		// that numeric range; a zero time is an open end.
		from, to := math.Inf(-1), math.Inf(1)
		if !start.IsZero() {
			from = numeric.Int64ToFloat64(start.UnixNano())
		}
		if !end.IsZero() {
			to = numeric.Int64ToFloat64(end.UnixNano())
		}
		return &from, &to, nil
	}
	return nil, nil, &filter.Error{Path: f.Name, Msg: fmt.Sprintf("range needs a number or date field, not %s", f.Type)}
}

// guardEvery is how many moves of a clause's searcher pass between two
// looks at the context: one look costs about what a move does, so the
// check adds a thousandth, and a search stops within a few thousand
// postings of its deadline.
const guardEvery = 1024

// guarded is a filter clause's query, whose searcher honours the search's
// context: Bleve builds no searcher for it once the context is done, and
// the searcher fails with the context's error when, on one of its moves
// (every guardEvery), the context is done. The filter's searcher moves
// its clauses' searchers on every move of its own, so a long walk of
// postings that match nothing stops too.
type guarded struct{ query.Query }

func (g guarded) Searcher(ctx context.Context, r index.IndexReader, m mapping.IndexMapping, o search.SearcherOptions) (search.Searcher, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := g.Query.Searcher(ctx, r, m, o)
	if err != nil {
		return nil, err
	}
	return &guardedSearcher{Searcher: s, ctx: ctx}, nil
}

type guardedSearcher struct {
	search.Searcher
	ctx   context.Context
	moves uint
}

func (s *guardedSearcher) check() error {
	s.moves++
	if s.moves%guardEvery == 0 {
		return s.ctx.Err()
	}
	return nil
}

func (s *guardedSearcher) Next(sc *search.SearchContext) (*search.DocumentMatch, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Searcher.Next(sc)
}

func (s *guardedSearcher) Advance(sc *search.SearchContext, id index.IndexInternalID) (*search.DocumentMatch, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.Searcher.Advance(sc, id)
}

// Optimize passes Bleve's optimisation of a disjunction or conjunction of
// term searchers (one union or intersection of their postings) through
// to the clause's searcher, as if it were not wrapped: nil when it cannot
// take part. The optimised searcher replaces the clauses' and is not
// guarded; it reads each posting once, where the collector checks.
func (s *guardedSearcher) Optimize(kind string, octx index.OptimizableContext) (index.OptimizableContext, error) {
	o, ok := s.Searcher.(index.Optimizable)
	if !ok {
		return nil, nil
	}
	return o.Optimize(kind, octx)
}
