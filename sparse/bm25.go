package sparse

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	"github.com/blevesearch/bleve/v2/search/searcher"
	index "github.com/blevesearch/bleve_index_api"
	segment "github.com/blevesearch/scorch_segment_api/v2"
	zap "github.com/blevesearch/zapx/v17"
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
// total length come from FieldStats, kept by Apply in the same Bleve
// batch as the documents; df from Bleve's postings, which count live
// documents only. A document's score is the sum over fields, with no
// coordination factor or query norm. A shard of a sharded collection is
// given N, the total lengths and the dfs of the whole collection instead
// (Query.Stats, stats.go), and computes the same expressions from them.

// statsKey is the Bleve internal key holding the FieldStats of every text
// field and of CompositeField, as JSON.
var statsKey = []byte("tandem.bm25.stats")

// lengthField is the internal Bleve field holding, as doc values, one term
// "field=length" per non-empty text field of a document (and of
// CompositeField), so that Apply can take a replaced or deleted document's
// lengths out of the statistics.
const lengthField = "_len"

// statsOf reads the statistics a reader's snapshot holds.
func statsOf(r index.IndexReader) (map[string]FieldStats, error) {
	v, err := r.GetInternal(statsKey)
	if err != nil {
		return nil, fmt.Errorf("sparse: read BM25 statistics: %w", err)
	}
	st := map[string]FieldStats{}
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
// query.Query it works wherever Bleve takes one, and Bleve's collector
// takes the top k and pages.
//
// Its searcher scores term at a time, from each segment's postings into a
// per-segment accumulator, then yields the matches in document order like
// any Bleve searcher. With limit > 0 it yields only the top limit: the
// documents scoring above the limit-th best score and, of those scoring
// it, the ones with the smallest document numbers (topk.go), so that a
// collector of at most limit hits keeps them all. So limit is set only
// when nothing outside the query drops documents: a filter is then the
// query's own, applied before the cut.
//
// With stats set, N, each field's total length and each term's df come
// from stats (a sharded collection's, summed over its shards) instead of
// the snapshot; only the postings, which say which documents match and
// with what tf and dl, come from the snapshot.
type bm25Query struct {
	clauses []bm25Clause
	k1, b   float64
	filter  query.Query
	limit   int
	docNums *docNumCache // maps tied documents to their numbers for the cut
	stats   *Stats
	// With limit > 0 and not exhaustive, the searcher skips the documents
	// that cannot enter the top limit (prune.go), testing bfilter, the
	// filter compiled to bitmaps, instead of running filter's searcher.
	exhaustive bool
	bfilter    *bitmapFilter
	blocks     *blockCache
}

// postingsSnapshot is what the searcher needs of Bleve's index reader:
// scorch's snapshot, whose segments hold the postings.
type postingsSnapshot interface {
	Segments() []*scorch.SegmentSnapshot
}

// postingLength is the length of the field a posting belongs to, from
// its norm, 1/√length as a float32. (Zap's postings give the length
// exactly, as the norm's bits; the searcher reads it there.)
func postingLength(p segment.Posting) float64 {
	if nm := p.Norm(); nm > 0 {
		return math.Round(1 / (nm * nm))
	}
	return 0
}

// bm25Term is one query term's postings in one field, in every segment.
type bm25Term struct {
	clause int                    // its clause in the query
	lists  []segment.PostingsList // per segment; nil where absent
	w      float64                // weight · idf · (k1+1)
	c1     float64                // k1·b/avgdl of the field
}

// termPostings reads query terms' postings from one snapshot, opening
// each field's term dictionary in every segment once.
type termPostings struct {
	segs  []*scorch.SegmentSnapshot
	dicts map[string][]segment.TermDictionary // per field, per segment
}

func newTermPostings(snap postingsSnapshot) *termPostings {
	return &termPostings{segs: snap.Segments(), dicts: map[string][]segment.TermDictionary{}}
}

// postings returns term's postings lists in field, one per segment (nil
// where the segment has no live document holding it), and its df: the
// number of live documents holding it, as the lists count them with each
// segment's deleted documents excluded. Search and QueryStats both take
// df from here, so a shard reports exactly the df it would score with.
func (tp *termPostings) postings(field, term string) ([]segment.PostingsList, uint64, error) {
	ds := tp.dicts[field]
	if ds == nil {
		ds = make([]segment.TermDictionary, len(tp.segs))
		for i, ss := range tp.segs {
			var err error
			if ds[i], err = ss.Segment().Dictionary(field); err != nil {
				return nil, 0, fmt.Errorf("sparse: BM25 field %s: %w", field, err)
			}
		}
		tp.dicts[field] = ds
	}
	lists := make([]segment.PostingsList, len(tp.segs))
	df := uint64(0)
	for i, ss := range tp.segs {
		pl, err := ds[i].PostingsList([]byte(term), ss.Deleted(), nil)
		if err != nil {
			return nil, 0, fmt.Errorf("sparse: BM25 term %q in %s: %w", term, field, err)
		}
		if n := pl.Count(); n > 0 {
			lists[i] = pl
			df += n
		}
	}
	return lists, df, nil
}

func (q *bm25Query) Searcher(ctx context.Context, r index.IndexReader, m mapping.IndexMapping, opts search.SearcherOptions) (search.Searcher, error) {
	snap, ok := r.(postingsSnapshot)
	if !ok {
		return nil, fmt.Errorf("sparse: BM25 needs scorch's index reader, got %T", r)
	}
	var st map[string]FieldStats
	if q.stats != nil {
		st = q.stats.Fields
	} else {
		var err error
		if st, err = statsOf(r); err != nil {
			return nil, err
		}
	}
	tp := newTermPostings(snap)
	var terms []bm25Term
	for ci, c := range q.clauses {
		fs := st[c.field]
		if fs.Docs == 0 {
			continue // no document has the field
		}
		lists, df, err := tp.postings(c.field, c.term)
		if err != nil {
			return nil, err
		}
		if df == 0 {
			continue // no document here holds the term
		}
		if q.stats != nil {
			// The collection's df, which counts this snapshot's too.
			if df = q.stats.DF[c.field][c.term]; df == 0 {
				continue
			}
		}
		// The same expressions whichever statistics: an index given its
		// own scores bit for bit as it does alone.
		n := float64(fs.Docs)
		idf := math.Log(1 + (n-float64(df)+0.5)/(float64(df)+0.5))
		terms = append(terms, bm25Term{
			clause: ci,
			lists:  lists,
			w:      c.weight * idf * (q.k1 + 1),
			c1:     q.k1 * q.b * n / float64(fs.Tokens),
		})
	}
	if len(terms) == 0 {
		return searcher.NewMatchNoneSearcher(r)
	}
	s := &bm25Searcher{buf: buffers.Get().(*matchBuffers)}
	s.docs, s.scores = s.buf.docs[:0], s.buf.scores[:0]
	if q.pruned(terms) {
		nums := newSnapshotDocNums(q.docNums, tp.segs)
		defer nums.retain()
		defer q.blocks.retain(tp.segs)
		if err := s.scorePruned(ctx, tp.segs, terms, q.clauses, q.k1*(1-q.b), q.limit, q.bfilter, q.blocks, nums.docNum); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	if err := s.score(ctx, tp.segs, terms, q.k1*(1-q.b)); err != nil {
		s.Close()
		return nil, err
	}
	s.count = uint64(len(s.docs))
	if q.filter != nil {
		if err := s.keep(ctx, r, m, q.filter); err != nil {
			s.Close()
			return nil, err
		}
	}
	if q.limit > 0 {
		nums := newSnapshotDocNums(q.docNums, tp.segs)
		defer nums.retain()
		if err := s.cut(ctx, q.limit, nums.docNum); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// pruned reports whether the searcher takes the top limit by block-max
// MaxScore (prune.go): asked for a top K, not told to be exhaustive, with
// the filter, if any, compiled to bitmaps, and every term's weight
// positive (the bounds assume contributions that only add).
func (q *bm25Query) pruned(terms []bm25Term) bool {
	if q.limit <= 0 || q.exhaustive || q.blocks == nil || (q.filter != nil && q.bfilter == nil) {
		return false
	}
	for _, t := range terms {
		if !(t.w > 0) || q.k1 < 0 || q.b < 0 || q.b > 1 || t.c1 < 0 {
			return false
		}
	}
	return true
}

// scoreCheckEvery is how many postings score reads between two looks at
// the context, besides one before each term's postings in each segment.
const scoreCheckEvery = 1 << 16

// score reads the terms' postings segment by segment and appends every
// matching document, with its score, to s.docs and s.scores in document
// order. c0 is k1·(1−b). It stops with the context's error when ctx is
// done.
func (s *bm25Searcher) score(ctx context.Context, segs []*scorch.SegmentSnapshot, terms []bm25Term, c0 float64) error {
	acc := accumulators.Get().(*accumulator)
	defer accumulators.Put(acc)
	var it segment.PostingsIterator
	base := uint64(0)
	for i, ss := range segs {
		size := ss.Segment().Count()
		acc.reset(size)
		for _, t := range terms {
			if t.lists[i] == nil {
				continue
			}
			if err := ctx.Err(); err != nil {
				acc.clear()
				return err
			}
			it = t.lists[i].Iterator(true, true, false, it)
			for n := 1; ; n++ {
				if n%scoreCheckEvery == 0 {
					if err := ctx.Err(); err != nil {
						acc.clear()
						return err
					}
				}
				p, err := it.Next()
				if err != nil {
					acc.clear()
					return fmt.Errorf("sparse: BM25 postings: %w", err)
				}
				if p == nil {
					break
				}
				var doc uint64
				var tf, dl float64
				if zp, ok := p.(*zap.Posting); ok {
					doc, tf, dl = zp.Number(), float64(zp.Frequency()), float64(zp.NormUint64())
				} else {
					doc, tf, dl = p.Number(), float64(p.Frequency()), postingLength(p)
				}
				acc.add(doc, t.w*tf/(tf+c0+t.c1*dl))
			}
		}
		s.docs, s.scores = acc.drain(size, base, s.docs, s.scores)
		// Scorch numbers a snapshot's documents segment after segment,
		// each segment counting its deleted documents too.
		base += size
	}
	return nil
}

// accumulator holds one segment's scores while its postings are read:
// a score per document number and a bit per document that has one.
type accumulator struct {
	score []float64
	bits  []uint64
}

var accumulators = sync.Pool{New: func() any { return new(accumulator) }}

// reset readies the accumulator for a segment of size documents. drain
// leaves it zeroed, so only growth allocates.
func (a *accumulator) reset(size uint64) {
	if uint64(len(a.score)) < size {
		a.score = make([]float64, size)
		a.bits = make([]uint64, (size+63)/64)
	}
}

func (a *accumulator) add(doc uint64, v float64) {
	a.score[doc] += v
	a.bits[doc>>6] |= 1 << (doc & 63)
}

// clear zeroes the accumulator after a failed read.
func (a *accumulator) clear() {
	clear(a.score)
	clear(a.bits)
}

// drain appends the scored documents, numbered from base, in order, and
// zeroes what it read.
func (a *accumulator) drain(size, base uint64, docs []uint64, scores []float64) ([]uint64, []float64) {
	for w, word := range a.bits[:(size+63)/64] {
		if word == 0 {
			continue
		}
		a.bits[w] = 0
		for word != 0 {
			d := uint64(w)<<6 | uint64(bits.TrailingZeros64(word))
			word &= word - 1
			docs = append(docs, base+d)
			scores = append(scores, a.score[d])
			a.score[d] = 0
		}
	}
	return docs, scores
}

// bm25Searcher yields scored documents in document order. Document
// numbers are scorch's internal ids, 8-byte big-endian integers. A
// cutQuery's searcher is one too, holding the top K of another
// searcher's matches.
type bm25Searcher struct {
	docs   []uint64
	scores []float64
	next   int
	count  uint64
	buf    *matchBuffers // where docs and scores live, pooled
}

// matchBuffers are a searcher's slices, kept for the next searcher.
type matchBuffers struct {
	docs   []uint64
	scores []float64
}

var buffers = sync.Pool{New: func() any { return new(matchBuffers) }}

var bm25SearcherSize = int(reflect.TypeOf(bm25Searcher{}).Size())

// keep drops the documents filter does not match, running its searcher
// over the same snapshot (unscored, as Bleve runs a boolean query's
// filter).
func (s *bm25Searcher) keep(ctx context.Context, r index.IndexReader, m mapping.IndexMapping, filter query.Query) error {
	fs, err := filter.Searcher(ctx, r, m, search.SearcherOptions{Score: "none"})
	if err != nil {
		return fmt.Errorf("sparse: filter: %w", err)
	}
	defer fs.Close()
	sctx := &search.SearchContext{DocumentMatchPool: search.NewDocumentMatchPool(fs.DocumentMatchPoolSize(), 0)}
	var id index.IndexInternalID
	var cur *search.DocumentMatch // the filter's match at or after d
	at := uint64(0)               // its document
	n := 0
	for i, d := range s.docs {
		if i%guardEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if cur == nil || at < d {
			if cur != nil {
				sctx.DocumentMatchPool.Put(cur)
			}
			id = binary.BigEndian.AppendUint64(id[:0], d)
			if cur, err = fs.Advance(sctx, id); err != nil {
				return fmt.Errorf("sparse: filter: %w", err)
			}
			if cur == nil {
				break // no later document matches the filter
			}
			at = binary.BigEndian.Uint64(cur.IndexInternalID)
		}
		if at == d {
			s.docs[n], s.scores[n] = d, s.scores[i]
			n++
		}
	}
	s.docs, s.scores = s.docs[:n], s.scores[:n]
	return nil
}

func (s *bm25Searcher) match(ctx *search.SearchContext) *search.DocumentMatch {
	if s.next >= len(s.docs) {
		return nil
	}
	dm := ctx.DocumentMatchPool.Get()
	dm.IndexInternalID = binary.BigEndian.AppendUint64(dm.IndexInternalID[:0], s.docs[s.next])
	dm.Score = s.scores[s.next]
	s.next++
	return dm
}

func (s *bm25Searcher) Next(ctx *search.SearchContext) (*search.DocumentMatch, error) {
	return s.match(ctx), nil
}

func (s *bm25Searcher) Advance(ctx *search.SearchContext, id index.IndexInternalID) (*search.DocumentMatch, error) {
	if len(id) != 8 {
		return nil, fmt.Errorf("sparse: BM25 advance: internal id of %d bytes, want 8", len(id))
	}
	target := binary.BigEndian.Uint64(id)
	s.next += sort.Search(len(s.docs)-s.next, func(i int) bool { return s.docs[s.next+i] >= target })
	return s.match(ctx), nil
}

func (s *bm25Searcher) Close() error {
	if s.buf != nil {
		s.buf.docs, s.buf.scores = s.docs[:0], s.scores[:0]
		buffers.Put(s.buf)
		s.buf = nil
	}
	s.docs, s.scores = nil, nil
	return nil
}

// Weight and SetQueryNorm take part in Bleve's query norm, which textbook
// BM25 has none of: the weight is neutral and the norm ignored.
func (s *bm25Searcher) Weight() float64            { return 1 }
func (s *bm25Searcher) SetQueryNorm(float64)       {}
func (s *bm25Searcher) Count() uint64              { return s.count }
func (s *bm25Searcher) Min() int                   { return 0 }
func (s *bm25Searcher) DocumentMatchPoolSize() int { return 1 }

func (s *bm25Searcher) Size() int {
	return bm25SearcherSize + 16*cap(s.docs)
}
