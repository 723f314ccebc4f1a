package sparse

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"

	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

// A search's top K is a function of the live documents and their scores
// alone: equal scores rank by ascending document number, and when more
// documents tie at the K-th best score than fit, the ones with the
// smallest document numbers make the cut (TestTiesByDocNum). Bleve would
// break ties by its hit number, the order of its snapshot's documents,
// which changes when segments merge and differs between an index built
// batch by batch and one rebuilt.
//
// Bleve's collector cannot be told to do this cheaply. A second sort
// key after the score makes it load the id of every match, not only of
// the K it returns, and compute a sort value for each: sorting by the id
// as a string (cheaper than the numeric key ties need) took a match-all
// over a million documents from 26 to 70 ms (BenchmarkSearchMillion,
// sort-by-id). So the searcher decides instead: it yields exactly the
// top K, at most K documents, which Bleve's collector then keeps whole,
// and Search sorts them (their ids are loaded anyway). The top K is
// collected in a heap (topK) that maps a document to its number only
// when its score equals one it is compared with, through docNumCache: a
// segment's document numbers are read once for its life. With distinct
// scores no number is read at all.
//
// Textbook BM25 (bm25Query) cuts the matches it holds. Bleve's BM25,
// filtered or not, is wrapped in a cutQuery, which collects its matches'
// top K one at a time, as Bleve's collector would. A search with no text
// ranks every match equally, so its top K are the smallest document
// numbers, which searchAll collects from the filter's bitmaps with no
// Bleve searcher at all.

// cutQuery is a query yielding only the top limit of q's matches, ties
// broken by document number.
type cutQuery struct {
	q       query.Query
	limit   int
	docNums *docNumCache
}

func (c *cutQuery) Searcher(ctx context.Context, r index.IndexReader, m mapping.IndexMapping, opts search.SearcherOptions) (search.Searcher, error) {
	snap, ok := r.(postingsSnapshot)
	if !ok {
		return nil, fmt.Errorf("sparse: ranking needs scorch's index reader, got %T", r)
	}
	in, err := c.q.Searcher(ctx, r, m, opts)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	nums := newSnapshotDocNums(c.docNums, snap.Segments())
	defer nums.retain()
	top := &topK{limit: c.limit, docNum: nums.docNum}
	sctx := &search.SearchContext{DocumentMatchPool: search.NewDocumentMatchPool(in.DocumentMatchPoolSize(), 0)}
	s := &bm25Searcher{}
	for ; ; s.count++ {
		// Bleve's collector, which would look at the context, no
		// longer runs over these matches.
		if s.count%guardEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		dm, err := in.Next(sctx)
		if err != nil {
			return nil, fmt.Errorf("sparse: search: %w", err)
		}
		if dm == nil {
			break
		}
		if len(dm.IndexInternalID) != 8 {
			return nil, fmt.Errorf("sparse: internal id of %d bytes, want 8", len(dm.IndexInternalID))
		}
		top.add(ranked{doc: binary.BigEndian.Uint64(dm.IndexInternalID), score: dm.Score})
		sctx.DocumentMatchPool.Put(dm)
	}
	if top.err != nil {
		return nil, top.err
	}
	s.docs, s.scores = top.docs(nil, nil)
	return s, nil
}

// matchAllScore is the score of every hit of a search with no text: the
// one Bleve's match-all query gives, its constant 1 times a query weight
// of 1, filtered or not (TestSearchAllMatchesBleve).
const matchAllScore = 1.0

// searchAll is Search with no text: every live document e matches (every
// one when e is nil) scores matchAllScore, so the top k are the k
// smallest document numbers among them. It finds the matches as
// FilterBitmap does, on each segment's postings, and maps them to their
// numbers through the cache, with no Bleve searcher: a few nanoseconds a
// match where Bleve's match-all searcher, and its boolean query under a
// filter, took tens.
func (x *Index) searchAll(ctx context.Context, schema *tandem.Schema, e filter.Expr, k int) ([]Hit, error) {
	bf := &bitmapFilter{op: opAnd} // every document
	if e != nil {
		var err error
		if bf, err = compileBitmap(ctx, e, schema); err != nil {
			return nil, err
		}
	}
	top := &topK{limit: k}
	err := x.withSegments("search", func(segs []*scorch.SegmentSnapshot) error {
		f := &segmentFilter{ctx: ctx}
		buf := make([]uint32, 1024)
		for _, ss := range segs {
			bm, err := f.live(ss, bf)
			if err != nil {
				return err
			}
			if bm.IsEmpty() {
				continue
			}
			nums := x.docNums.segment(f.seg)
			it := bm.ManyIterator()
			for n := it.NextMany(buf); n > 0; n = it.NextMany(buf) {
				if err := ctx.Err(); err != nil {
					return err
				}
				for _, local := range buf[:n] {
					num, err := nums.docNum(uint64(local))
					if err != nil {
						return err
					}
					top.add(ranked{score: matchAllScore, num: num, known: true})
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(top.heap, func(a, b ranked) int { return cmp.Compare(a.num, b.num) })
	hits := make([]Hit, len(top.heap))
	for i, r := range top.heap {
		hits[i] = Hit{DocNum: r.num, Score: r.score}
	}
	return hits, nil
}

// cut keeps the limit best documents (topK), asking docNum for their
// document numbers. It looks at the context every guardEvery documents.
func (s *bm25Searcher) cut(ctx context.Context, limit int, docNum func(uint64) (uint64, error)) error {
	if len(s.docs) <= limit {
		return nil
	}
	top := &topK{limit: limit, docNum: docNum, heap: make([]ranked, 0, limit)}
	for i, d := range s.docs {
		if i%guardEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		top.add(ranked{doc: d, score: s.scores[i]})
	}
	if top.err != nil {
		return top.err
	}
	s.docs, s.scores = top.docs(s.docs[:0], s.scores[:0])
	return nil
}

// topK keeps the limit best of the documents added: by score, then by
// ascending document number. It asks docNum for a document's number
// (given the snapshot's) only when its score equals that of one it is
// compared with, and once per document: with distinct scores, never.
type topK struct {
	limit  int
	docNum func(uint64) (uint64, error)
	heap   []ranked // the worst kept at the root
	err    error    // docNum's first error, after which the ranking is void
}

// ranked is a document in a topK.
type ranked struct {
	doc   uint64 // the snapshot's number
	score float64
	num   uint64 // the document number, once known
	known bool   // whether num is
}

func (t *topK) add(r ranked) {
	// Most documents, once the heap holds good ones; small enough to be
	// inlined.
	if len(t.heap) == t.limit && r.score < t.heap[0].score {
		return
	}
	t.push(r)
}

func (t *topK) push(r ranked) {
	if len(t.heap) < t.limit {
		t.heap = append(t.heap, r)
		for i := len(t.heap) - 1; i > 0; {
			p := (i - 1) / 2
			if !t.below(&t.heap[i], &t.heap[p]) {
				break
			}
			t.heap[i], t.heap[p] = t.heap[p], t.heap[i]
			i = p
		}
		return
	}
	if !t.below(&t.heap[0], &r) {
		return
	}
	t.heap[0] = r
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(t.heap) {
			return
		}
		if c+1 < len(t.heap) && t.below(&t.heap[c+1], &t.heap[c]) {
			c++
		}
		if !t.below(&t.heap[c], &t.heap[i]) {
			return
		}
		t.heap[i], t.heap[c] = t.heap[c], t.heap[i]
		i = c
	}
}

// below reports whether a ranks below b.
func (t *topK) below(a, b *ranked) bool {
	if a.score != b.score {
		return a.score < b.score
	}
	return t.num(a) > t.num(b)
}

func (t *topK) num(r *ranked) uint64 {
	if !r.known && t.err == nil {
		r.num, t.err = t.docNum(r.doc)
		r.known = true
	}
	return r.num
}

// docs appends the documents kept, in the snapshot's order, and their
// scores.
func (t *topK) docs(docs []uint64, scores []float64) ([]uint64, []float64) {
	slices.SortFunc(t.heap, func(a, b ranked) int { return cmp.Compare(a.doc, b.doc) })
	for _, r := range t.heap {
		docs = append(docs, r.doc)
		scores = append(scores, r.score)
	}
	return docs, scores
}

// snapshotDocNums maps one snapshot's documents to their document
// numbers through the index's docNumCache. Scorch numbers a snapshot's
// documents segment after segment, each segment counting its deleted
// documents too.
type snapshotDocNums struct {
	cache  *docNumCache
	segs   []*scorch.SegmentSnapshot
	starts []uint64 // the number of each segment's first document, then the end; nil until asked

	// The segment of the last lookup: its documents' numbers, [base,
	// end), and its entry in the cache; nums is nil until asked.
	base, end uint64
	nums      *segDocNums
}

// newSnapshotDocNums maps segs' documents through cache; a nil cache
// stands for one of the mapper's own.
func newSnapshotDocNums(cache *docNumCache, segs []*scorch.SegmentSnapshot) *snapshotDocNums {
	if cache == nil {
		cache = new(docNumCache)
	}
	return &snapshotDocNums{cache: cache, segs: segs}
}

// docNum returns the document number of the snapshot's document id.
func (m *snapshotDocNums) docNum(id uint64) (uint64, error) {
	if m.nums == nil || id < m.base || id >= m.end {
		if m.starts == nil {
			m.starts = make([]uint64, len(m.segs)+1)
			for i, ss := range m.segs {
				m.starts[i+1] = m.starts[i] + ss.Segment().Count()
			}
		}
		i := sort.Search(len(m.segs), func(i int) bool { return id < m.starts[i+1] })
		if i == len(m.segs) {
			return 0, fmt.Errorf("sparse: document %d past the snapshot's %d", id, m.starts[i])
		}
		m.base, m.end = m.starts[i], m.starts[i+1]
		m.nums = m.cache.segment(m.segs[i].Segment())
	}
	return m.nums.docNum(id - m.base)
}

// retain keeps in the cache the entries of the snapshot's segments only,
// once the cache has been asked: without it, segments a merge has
// replaced would stay in the cache until the next FilterBitmap.
func (m *snapshotDocNums) retain() {
	if m.starts != nil {
		m.cache.retain(m.segs)
	}
}
