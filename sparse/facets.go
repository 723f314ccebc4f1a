package sparse

import (
	"context"
	"fmt"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/numeric"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

// ScanScope chooses the documents ScanValues visits: those Filter
// matches (every document when it is nil), and of those, when Docs is
// not nil, only the ones Docs lists (none when it is empty).
type ScanScope struct {
	Filter filter.Expr
	Docs   []uint64
}

// A ValueVisitor receives the metadata values of the documents ScanValues
// visits: Doc once per document, then one call per value of each field
// asked for, fields named by their position in the list. A keywords
// field's values are distinct and in byte order; every other field has at
// most one value. A keyword's bytes are valid only during the call.
type ValueVisitor interface {
	Doc()
	Keyword(field int, value []byte)
	Number(field int, value float64)
	Date(field int, unixNano int64)
	Bool(field int, value bool)
	// Err stops the scan when it is not nil: a visitor that has seen
	// enough to fail (a histogram over its bucket limit) says so. It is
	// asked every 1024 documents and at the end.
	Err() error
}

// ScanValues visits the documents of scope, in index order, with the
// values of fields (keyword, keywords, number, date or bool fields of
// schema), read from the fields' doc values: no stored document is
// loaded. It returns the number of documents visited. The scope is read
// from one snapshot of the index, so the values are those of the
// documents as the index holds them.
func (x *Index) ScanValues(ctx context.Context, schema *tandem.Schema, scope ScanScope, fields []string, v ValueVisitor) (uint64, error) {
	kinds := make([]tandem.FieldType, len(fields))
	cols := make([]string, len(fields)) // the doc values read
	for i, name := range fields {
		f, ok := schema.Field(name)
		if !ok {
			return 0, &tandem.FieldError{Field: name, Err: tandem.ErrUnknownField}
		}
		switch f.Type {
		case tandem.Keyword, tandem.Keywords, tandem.Number, tandem.Date, tandem.Bool:
		default:
			return 0, &tandem.FieldError{Field: name, Err: fmt.Errorf("%w: a %s field has no values to scan", tandem.ErrWrongType, f.Type)}
		}
		kinds[i] = f.Type
		cols[i] = name
		if f.Type == tandem.Number || f.Type == tandem.Date {
			cols[i] = valuePrefix + name
		}
	}
	q, err := x.scopeQuery(ctx, schema, scope)
	if err != nil {
		return 0, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return 0, ErrClosed
	}
	r, err := x.reader()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	s, err := q.Searcher(ctx, r, x.mapping, search.SearcherOptions{Score: "none"})
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("sparse: scan: %w", err)
	}
	defer s.Close()
	dvr, err := r.DocValueReader(cols)
	if err != nil {
		return 0, fmt.Errorf("sparse: scan: %w", err)
	}
	visit := func(field string, term []byte) {
		i := 0
		for i < len(cols) && cols[i] != field {
			i++
		}
		if i == len(cols) {
			return
		}
		switch kinds[i] {
		case tandem.Keyword, tandem.Keywords:
			v.Keyword(i, term)
		case tandem.Bool:
			if len(term) == 1 {
				v.Bool(i, term[0] == 'T')
			}
		case tandem.Number, tandem.Date:
			n, err := numeric.PrefixCoded(term).Int64()
			if err != nil {
				return
			}
			if kinds[i] == tandem.Number {
				v.Number(i, numeric.Int64ToFloat64(n))
			} else {
				v.Date(i, n)
			}
		}
	}
	sctx := &search.SearchContext{DocumentMatchPool: search.NewDocumentMatchPool(s.DocumentMatchPoolSize(), 0)}
	var n uint64
	for {
		if n%guardEvery == 0 {
			if err := ctx.Err(); err != nil {
				return n, err
			}
			if err := v.Err(); err != nil {
				return n, err
			}
		}
		dm, err := s.Next(sctx)
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			return n, fmt.Errorf("sparse: scan: %w", err)
		}
		if dm == nil {
			break
		}
		n++
		v.Doc()
		if err := dvr.VisitDocValues(dm.IndexInternalID, visit); err != nil {
			return n, fmt.Errorf("sparse: scan: doc values: %w", err)
		}
		sctx.DocumentMatchPool.Put(dm)
	}
	return n, v.Err()
}

// scopeQuery is the Bleve query matching scope's documents.
func (x *Index) scopeQuery(ctx context.Context, schema *tandem.Schema, scope ScanScope) (query.Query, error) {
	var q query.Query = query.NewMatchAllQuery()
	if scope.Filter != nil {
		var err error
		if q, err = Compile(ctx, scope.Filter, schema); err != nil {
			return nil, err
		}
	}
	if scope.Docs == nil {
		return q, nil
	}
	ids := make([]string, len(scope.Docs))
	for i, d := range scope.Docs {
		ids[i] = DocID(d)
	}
	docs := query.NewDocIDQuery(ids)
	if scope.Filter == nil {
		return docs, nil
	}
	return query.NewConjunctionQuery([]query.Query{docs, q}), nil
}

// valuePrefix starts the name of a number or date field's value column:
// the internal field holding only its exact value, as the shift-0
// prefix-coded term, with doc values. The field itself is indexed at
// every precision shift for range filters, 16 terms a value, which doc
// values would hold too and a scan would visit.
const valuePrefix = "_value."

func valueColumn(field string, v int64, kw analysis.Analyzer) *document.TextField {
	return document.NewTextFieldCustom(valuePrefix+field, nil, numeric.MustNewPrefixCodedInt64(v, 0), metadataOptions, kw)
}
