package sparse

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/searcher"
	index "github.com/blevesearch/bleve_index_api"
)

// Textbook BM25, as Lucene and Anserini compute it but with exact
// document lengths and Robertson's (k1+1) factor:
//
//	score(d) = Σ_t w_t · idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))
//	idf(t)   = ln(1 + (N − df + 0.5) / (df + 0.5))
//
// per searched field, where w_t is the field's boost times the number of
// times t occurs in the analysed query, tf the occurrences of t in the
// document's field, dl the field's length in tokens (as Bleve stores it,
// 1/√dl in each posting), df the documents holding t in the field, N the
// documents with a non-empty field and avgdl their mean length. N and the
// total length come from fieldStats, kept by Apply in the same Bleve
// batch as the documents; df from Bleve's postings, which count live
// documents only. A document's score is the sum over fields, with no
// coordination factor or query norm.

// statsKey is the Bleve internal key holding the fieldStats of every text
// field and of CompositeField, as JSON.
var statsKey = []byte("tandem.bm25.stats")

// lengthField is the internal Bleve field holding, as doc values, one term
// "field=length" per non-empty text field of a document (and of
// CompositeField), so that Apply can take a replaced or deleted document's
// lengths out of the statistics.
const lengthField = "_len"

// fieldStats are the BM25 collection statistics of one field.
type fieldStats struct {
	Docs   uint64 `json:"docs"`   // documents whose field has a token
	Tokens uint64 `json:"tokens"` // their tokens, in total
}

// statsOf reads the statistics a reader's snapshot holds.
func statsOf(r index.IndexReader) (map[string]fieldStats, error) {
	v, err := r.GetInternal(statsKey)
	if err != nil {
		return nil, fmt.Errorf("sparse: read BM25 statistics: %w", err)
	}
	st := map[string]fieldStats{}
	if len(v) > 0 {
		if err := json.Unmarshal(v, &st); err != nil {
			return nil, fmt.Errorf("sparse: BM25 statistics: %w", err)
		}
	}
	return st, nil
}

// lengthTerm and parseLengthTerm encode a field's length as a term of
// lengthField.
func lengthTerm(field string, n int) string { return field + "=" + strconv.Itoa(n) }

func parseLengthTerm(t string) (string, uint64, bool) {
	i := strings.LastIndexByte(t, '=')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(t[i+1:], 10, 64)
	return t[:i], n, err == nil
}

// analyzedText is a Bleve text field analysed when it is built, so that
// its length is known before its batch runs; Bleve's own call to Analyze
// then does nothing.
type analyzedText struct{ *document.TextField }

func (analyzedText) Analyze() {}

// bm25Clause is one analysed query term in one field.
type bm25Clause struct {
	field, term string
	weight      float64 // the field's boost × the term's count in the query
}

// bm25Query is a Bleve query scoring its clauses with textbook BM25. As a
// query.Query it works wherever Bleve takes one, so filters (a boolean
// query's Filter), top-k collection and paging stay Bleve's.
type bm25Query struct {
	clauses []bm25Clause
	k1, b   float64
}

func (q *bm25Query) Searcher(ctx context.Context, r index.IndexReader, _ mapping.IndexMapping, opts search.SearcherOptions) (search.Searcher, error) {
	st, err := statsOf(r)
	if err != nil {
		return nil, err
	}
	s := &bm25Searcher{c0: q.k1 * (1 - q.b)}
	for _, c := range q.clauses {
		fs := st[c.field]
		if fs.Docs == 0 {
			continue // no document has the field
		}
		tfr, err := r.TermFieldReader(ctx, []byte(c.term), c.field, true, true, false)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("sparse: BM25 term %q in %s: %w", c.term, c.field, err)
		}
		df := tfr.Count()
		if df == 0 {
			tfr.Close()
			continue
		}
		n := float64(fs.Docs)
		idf := math.Log(1 + (n-float64(df)+0.5)/(float64(df)+0.5))
		first, err := tfr.Next(nil)
		if err != nil {
			tfr.Close()
			s.Close()
			return nil, fmt.Errorf("sparse: BM25 term %q in %s: %w", c.term, c.field, err)
		}
		if first == nil {
			tfr.Close()
			continue
		}
		if err := s.add(tfr, first, c.weight*idf*(q.k1+1), q.k1*q.b*n/float64(fs.Tokens)); err != nil {
			tfr.Close()
			s.Close()
			return nil, err
		}
		s.count += df
	}
	if len(s.terms) == 0 {
		return searcher.NewMatchNoneSearcher(r)
	}
	return s, nil
}

// bm25Searcher merges its terms' postings in document order and sums
// their BM25 contributions. Queries have tens of terms, so the next
// document is found by a scan rather than a heap. Document numbers are
// scorch's internal ids, 8-byte big-endian integers, compared as such.
type bm25Searcher struct {
	terms []bm25Term
	c0    float64 // k1·(1−b)
	count uint64
}

// bm25Term is one query term's postings in one field.
type bm25Term struct {
	r   index.TermFieldReader
	cur *index.TermFieldDoc // current posting
	doc uint64              // its document, done once exhausted
	w   float64             // weight · idf · (k1+1)
	c1  float64             // k1·b/avgdl of the field
}

// done is the document number of an exhausted reader.
const done = math.MaxUint64

var bm25SearcherSize = int(reflect.TypeOf(bm25Searcher{}).Size())

// docNum is the document number of posting p (done for nil).
func docNum(p *index.TermFieldDoc) (uint64, error) {
	if p == nil {
		return done, nil
	}
	if len(p.ID) != 8 {
		return 0, fmt.Errorf("sparse: BM25 postings: internal id of %d bytes, want 8", len(p.ID))
	}
	return binary.BigEndian.Uint64(p.ID), nil
}

// add appends a term whose reader is positioned on its first posting.
func (s *bm25Searcher) add(r index.TermFieldReader, first *index.TermFieldDoc, w, c1 float64) error {
	n, err := docNum(first)
	if err != nil {
		return err
	}
	s.terms = append(s.terms, bm25Term{r: r, cur: first, doc: n, w: w, c1: c1})
	return nil
}

func (s *bm25Searcher) Next(ctx *search.SearchContext) (*search.DocumentMatch, error) {
	min := uint64(done)
	for i := range s.terms {
		if d := s.terms[i].doc; d < min {
			min = d
		}
	}
	if min == done {
		return nil, nil
	}
	score := 0.0
	for i := range s.terms {
		t := &s.terms[i]
		if t.doc != min {
			continue
		}
		tf := float64(t.cur.Freq)
		dl := 0.0
		if nm := t.cur.Norm; nm > 0 {
			dl = math.Round(1 / (nm * nm))
		}
		score += t.w * tf / (tf + s.c0 + t.c1*dl)
		next, err := t.r.Next(t.cur)
		if err != nil {
			return nil, fmt.Errorf("sparse: BM25 postings: %w", err)
		}
		t.cur = next
		if t.doc, err = docNum(next); err != nil {
			return nil, err
		}
	}
	dm := ctx.DocumentMatchPool.Get()
	dm.IndexInternalID = binary.BigEndian.AppendUint64(dm.IndexInternalID[:0], min)
	dm.Score = score
	return dm, nil
}

func (s *bm25Searcher) Advance(ctx *search.SearchContext, id index.IndexInternalID) (*search.DocumentMatch, error) {
	if len(id) != 8 {
		return nil, fmt.Errorf("sparse: BM25 advance: internal id of %d bytes, want 8", len(id))
	}
	target := binary.BigEndian.Uint64(id)
	for i := range s.terms {
		t := &s.terms[i]
		if t.doc >= target {
			continue
		}
		next, err := t.r.Advance(id, t.cur)
		if err != nil {
			return nil, fmt.Errorf("sparse: BM25 postings: %w", err)
		}
		t.cur = next
		if t.doc, err = docNum(next); err != nil {
			return nil, err
		}
	}
	return s.Next(ctx)
}

func (s *bm25Searcher) Close() error {
	var first error
	for _, t := range s.terms {
		if err := t.r.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.terms = nil
	return first
}

// Weight and SetQueryNorm take part in Bleve's query norm, which textbook
// BM25 has none of: the weight is neutral and the norm ignored.
func (s *bm25Searcher) Weight() float64            { return 1 }
func (s *bm25Searcher) SetQueryNorm(float64)       {}
func (s *bm25Searcher) Count() uint64              { return s.count }
func (s *bm25Searcher) Min() int                   { return 0 }
func (s *bm25Searcher) DocumentMatchPoolSize() int { return 1 }

func (s *bm25Searcher) Size() int {
	n := bm25SearcherSize
	for _, t := range s.terms {
		n += t.r.Size()
	}
	return n
}
