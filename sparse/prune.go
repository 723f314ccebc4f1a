package sparse

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/blevesearch/bleve/v2/index/scorch"
	segment "github.com/blevesearch/scorch_segment_api/v2"
	zap "github.com/blevesearch/zapx/v17"
)

// Block-max MaxScore. The textbook scorer, asked for the top K (limit),
// need not read every posting: a document whose score cannot reach the
// K-th best so far cannot enter the top K. It goes document at a time,
// segment after segment, with the top K found so far carried over (the
// threshold θ is the K-th best score once K are held):
//
//   - Each term has, per segment, blocks of blockPostings postings, each
//     with the largest tf and the smallest length of its postings, which
//     bound any of its documents' contribution: w·tf/(tf + k1(1−b) +
//     k1·b·dl/avgdl) grows with tf and falls with dl. Zap segments never
//     change, so the blocks are computed once per segment and term, from
//     all its postings (deleted documents only lower the true maxima), and
//     kept in a blockCache while the segment lives.
//   - MaxScore (Turtle and Flood): terms in increasing order of their
//     largest bound; those whose bounds together stay below θ are
//     non-essential, since a document holding only them cannot reach θ.
//     Candidates come from the essential terms' postings only; the
//     non-essential ones are looked up for a candidate while its partial
//     score and the rest's bounds can still reach θ.
//   - Block-max (Ding and Suel; Chakrabarti et al.): before scoring a
//     candidate, the sum of every term's bound in the block holding it
//     bounds every document up to the nearest block end; below θ, the
//     essential terms skip past it.
//
// A document is dropped only when its bound is below θ strictly, and the
// bounds are widened by a relative 1e-9 against rounding, so a document
// tying with the K-th best is still offered, and the top K keeps ties by
// document number as the exhaustive path does (topK). Each candidate's
// score is summed in the clauses' order, as the exhaustive accumulator
// sums it, so scores are bit for bit the same (TestPrunedMatchesExhaustive).
// A filter is a bitmap per segment (segmentFilter), tested per candidate.

// blockPostings is the number of postings a block bounds: Lucene's and
// Tantivy's block size.
const blockPostings = 128

// blocksFrom is the shortest postings list given blocks: a shorter one
// costs little to read whole, so it is bounded by its weight alone
// (unbounded), with no scan to compute its blocks. A variable for the
// tests, which set it to 0 to give every list blocks.
var blocksFrom uint64 = 4096

// unbounded is the one block of a list without blocks: any tf, any length,
// which bounds a contribution by the term's weight.
var unbounded = []block{{last: noDoc - 1, maxTF: math.MaxUint32, minDL: 0}}

// boundSlack widens every bound, against the rounding of sums taken in
// another order than the score's.
const boundSlack = 1 + 1e-9

// block bounds the postings of one term in one segment up to document
// last (a segment's number), from the previous block's last.
type block struct {
	last  uint64
	maxTF uint32
	minDL uint32
}

// blockKey names one term's blocks in one segment.
type blockKey struct {
	seg         segment.Segment
	field, term string
}

// blockCache keeps the blocks of the terms searched, per segment, for the
// segments of the last snapshot searched (retain), up to maxBlockBytes;
// past that it starts again empty. It is safe for concurrent use.
type blockCache struct {
	mu    sync.Mutex
	m     map[blockKey][]block
	bytes int
	last  []segment.Segment // the segments of the last retain
}

// maxBlockBytes bounds a blockCache: 16 bytes a block of 128 postings,
// so 64 MiB covers the blocks of 537M postings.
const maxBlockBytes = 64 << 20

func (c *blockCache) get(k blockKey) ([]block, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[k]
	return b, ok
}

func (c *blockCache) put(k blockKey, b []block) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.bytes+16*len(b) > maxBlockBytes {
		c.m, c.bytes = map[blockKey][]block{}, 0
	}
	if _, ok := c.m[k]; !ok {
		c.m[k] = b
		c.bytes += 16 * len(b)
	}
}

// retain drops the blocks of the segments segs does not hold (nil: all).
// It walks the cache only when segs differ from the last call's.
func (c *blockCache) retain(segs []*scorch.SegmentSnapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) == 0 {
		return
	}
	same := segs != nil && len(segs) == len(c.last)
	for i := 0; same && i < len(segs); i++ {
		same = segs[i].Segment() == c.last[i]
	}
	if same {
		return
	}
	c.last = c.last[:0]
	for _, ss := range segs {
		c.last = append(c.last, ss.Segment())
	}
	keep := make(map[segment.Segment]bool, len(segs))
	for _, ss := range segs {
		keep[ss.Segment()] = true
	}
	for k, b := range c.m {
		if !keep[k.seg] {
			delete(c.m, k)
			c.bytes -= 16 * len(b)
		}
	}
}

// blocks returns the blocks of term in field of the segment ss, from the
// cache or computed from every posting, deleted documents included.
func (c *blockCache) blocks(ss *scorch.SegmentSnapshot, field, term string) ([]block, error) {
	k := blockKey{seg: ss.Segment(), field: field, term: term}
	if b, ok := c.get(k); ok {
		return b, nil
	}
	dict, err := ss.Segment().Dictionary(field)
	if err != nil {
		return nil, err
	}
	pl, err := dict.PostingsList([]byte(term), nil, nil)
	if err != nil {
		return nil, err
	}
	var out []block
	cur := block{minDL: math.MaxUint32}
	n := 0
	it := pl.Iterator(true, true, false, nil)
	for {
		p, err := it.Next()
		if err != nil {
			return nil, err
		}
		if p == nil {
			break
		}
		tf, dl := p.Frequency(), postingDL(p)
		cur.last = p.Number()
		cur.maxTF = max(cur.maxTF, uint32(min(tf, math.MaxUint32)))
		cur.minDL = min(cur.minDL, uint32(min(dl, math.MaxUint32)))
		if n++; n == blockPostings {
			out = append(out, cur)
			cur, n = block{minDL: math.MaxUint32}, 0
		}
	}
	if n > 0 {
		out = append(out, cur)
	}
	c.put(k, out)
	return out, nil
}

// postingDL is a posting's field length as the scorer reads it.
func postingDL(p segment.Posting) uint64 {
	if zp, ok := p.(*zap.Posting); ok {
		return zp.NormUint64()
	}
	return uint64(postingLength(p))
}

// noDoc marks an exhausted cursor.
const noDoc = math.MaxUint64

// cursor walks one term's postings in one segment.
type cursor struct {
	ti     int // the term's place among the query's terms
	it     segment.PostingsIterator
	doc    uint64 // the current posting's document, noDoc at the end
	tf, dl float64
	w, c1  float64
	blocks []block
	bi     int     // the block holding doc or the last document asked about
	max    float64 // the largest bound of its blocks
	bound  float64 // the bound of the block of the last bound call
}

func (c *cursor) read(p segment.Posting, err error) error {
	if err != nil {
		return fmt.Errorf("sparse: BM25 postings: %w", err)
	}
	if p == nil {
		c.doc = noDoc
		return nil
	}
	if zp, ok := p.(*zap.Posting); ok {
		c.doc, c.tf, c.dl = zp.Number(), float64(zp.Frequency()), float64(zp.NormUint64())
	} else {
		c.doc, c.tf, c.dl = p.Number(), float64(p.Frequency()), postingLength(p)
	}
	return nil
}

func (c *cursor) next() error { return c.read(c.it.Next()) }

// advance moves to the first posting at or after d.
func (c *cursor) advance(d uint64) error {
	if c.doc >= d {
		return nil
	}
	return c.read(c.it.Advance(d))
}

// score is the current posting's contribution, as score computes it.
func (c *cursor) score(c0 float64) float64 {
	return c.w * c.tf / (c.tf + c0 + c.c1*c.dl)
}

func (c *cursor) blockBound(b block, c0 float64) float64 {
	tf, dl := float64(b.maxTF), float64(b.minDL)
	return c.w * tf / (tf + c0 + c.c1*dl) * boundSlack
}

// boundAt sets c.bound to the bound of the block that would hold d (0
// past the last), and returns the last document that bound covers.
func (c *cursor) boundAt(d uint64, c0 float64) uint64 {
	for c.bi < len(c.blocks) && c.blocks[c.bi].last < d {
		c.bi++
	}
	if c.bi == len(c.blocks) {
		c.bound = 0
		return noDoc
	}
	c.bound = c.blockBound(c.blocks[c.bi], c0)
	return c.blocks[c.bi].last
}

// scorePruned sets s.docs and s.scores to the top limit documents of the
// terms' matches allowed by bf (all when nil), in document order, as
// score, keep and cut together would. docNum maps a snapshot's document to
// its number for ties (topK).
func (s *bm25Searcher) scorePruned(ctx context.Context, segs []*scorch.SegmentSnapshot, terms []bm25Term, clauses []bm25Clause,
	c0 float64, limit int, bf *bitmapFilter, blocks *blockCache, docNum func(uint64) (uint64, error)) error {
	top := &topK{limit: limit, docNum: docNum, heap: make([]ranked, 0, limit)}
	theta := func() float64 {
		if len(top.heap) < limit {
			return math.Inf(-1)
		}
		return top.heap[0].score
	}
	parts := make([]float64, len(terms))
	var sf *segmentFilter
	if bf != nil {
		sf = &segmentFilter{ctx: ctx}
	}
	base := uint64(0)
	for i, ss := range segs {
		segBase := base
		base += ss.Segment().Count()
		var allow *roaring.Bitmap
		if sf != nil {
			var err error
			if allow, err = sf.live(ss, bf); err != nil {
				return err
			}
			if allow.IsEmpty() {
				continue
			}
		}
		var cs []*cursor
		for ti, t := range terms {
			if t.lists[i] == nil {
				continue
			}
			bl := unbounded
			if t.lists[i].Count() >= blocksFrom {
				var err error
				if bl, err = blocks.blocks(ss, clauses[t.clause].field, clauses[t.clause].term); err != nil {
					return fmt.Errorf("sparse: BM25 blocks: %w", err)
				}
			}
			c := &cursor{ti: ti, it: t.lists[i].Iterator(true, true, false, nil), w: t.w, c1: t.c1, blocks: bl}
			for _, b := range bl {
				c.max = max(c.max, c.blockBound(b, c0))
			}
			if err := c.next(); err != nil {
				return err
			}
			cs = append(cs, c)
		}
		if len(cs) == 0 {
			continue
		}
		if err := scoreSegment(ctx, cs, c0, allow, segBase, top, theta, parts); err != nil {
			return err
		}
	}
	if top.err != nil {
		return top.err
	}
	s.docs, s.scores = top.docs(s.docs[:0], s.scores[:0])
	s.count = uint64(len(s.docs))
	return nil
}

// scoreSegment offers to top every document of one segment that can
// enter it; see the comment at the top of the file.
func scoreSegment(ctx context.Context, cs []*cursor, c0 float64, allow *roaring.Bitmap, base uint64, top *topK, theta func() float64, parts []float64) error {
	slices.SortFunc(cs, func(a, b *cursor) int {
		if a.max != b.max {
			if a.max < b.max {
				return -1
			}
			return 1
		}
		return a.ti - b.ti
	})
	// prefix[j] is the sum of the largest bounds of cs[:j].
	prefix := make([]float64, len(cs)+1)
	for j, c := range cs {
		prefix[j+1] = prefix[j] + c.max
	}
	th := theta()
	essential := 0 // cs[:essential] are non-essential
	setEssential := func() {
		for essential < len(cs) && prefix[essential+1] < th {
			essential++
		}
	}
	setEssential()
	var allowIt roaring.IntPeekable
	if allow != nil {
		allowIt = allow.Iterator()
	}
	for steps := 0; essential < len(cs); steps++ {
		if steps%guardEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		d := uint64(noDoc)
		for _, c := range cs[essential:] {
			d = min(d, c.doc)
		}
		if d == noDoc {
			return nil
		}
		if allowIt != nil {
			allowIt.AdvanceIfNeeded(uint32(d))
			if !allowIt.HasNext() {
				return nil
			}
			if a := uint64(allowIt.PeekNext()); a != d {
				for _, c := range cs[essential:] {
					if err := c.advance(a); err != nil {
						return err
					}
				}
				continue
			}
		}
		// Every term's block bound at d, valid up to the nearest block end.
		ub, end := 0.0, uint64(noDoc)
		for _, c := range cs {
			end = min(end, c.boundAt(d, c0))
			ub += c.bound
		}
		if ub < th {
			// No document up to end can reach θ.
			next := end + 1
			if end == noDoc {
				return nil
			}
			for _, c := range cs[essential:] {
				if err := c.advance(next); err != nil {
					return err
				}
			}
			continue
		}
		// The essential terms' contributions, then the others' while the
		// bounds of those left can still lift the score to θ.
		clear(parts)
		partial := 0.0
		for _, c := range cs[essential:] {
			if c.doc == d {
				v := c.score(c0)
				parts[c.ti] = v
				partial += v
				if err := c.next(); err != nil {
					return err
				}
			}
		}
		rest := 0.0
		for _, c := range cs[:essential] {
			rest += c.bound
		}
		reach := true
		for j := essential - 1; j >= 0; j-- {
			if (partial+rest)*boundSlack < th {
				reach = false
				break
			}
			c := cs[j]
			rest -= c.bound
			if err := c.advance(d); err != nil {
				return err
			}
			if c.doc == d {
				v := c.score(c0)
				parts[c.ti] = v
				partial += v
			}
		}
		if !reach {
			continue
		}
		// The score as the exhaustive accumulator sums it: in the terms'
		// order, from zero.
		score := 0.0
		for _, v := range parts {
			score += v
		}
		top.add(ranked{doc: base + d, score: score})
		if top.err != nil {
			return top.err
		}
		if t := theta(); t > th {
			th = t
			setEssential()
		}
	}
	return nil
}
