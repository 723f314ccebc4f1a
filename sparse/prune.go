package sparse

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/blevesearch/bleve/v2/index/scorch"
	segment "github.com/blevesearch/scorch_segment_api/v2"
	zap "github.com/blevesearch/zapx/v17"

	"github.com/tandemsearch/tandem/internal/manual"
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
//   - The same scan decodes the postings of lists of up to a share of the
//     cache (decoded), which the cursors then read instead of zap's
//     iterator. Zap, when frequencies are wanted, advances one posting at
//     a time, so a skip costs what it skips; a decoded list skips by a
//     galloping search. Decoded lists keep deleted documents, which the
//     scorer tests candidates against.
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

// decoded is one term's postings in one segment, deleted documents
// included, in document order: what zap's iterator gives, held so that a
// cursor can jump to a document by search. Zap moves its iterator one
// posting at a time when frequencies are wanted, which makes every skip
// cost what it skips; here a skip costs a galloping search.
//
// A posting takes 4 bytes, outside the Go heap (internal/manual): the low
// 16 bits of its document, and its frequency (4 bits) and the field's
// length (12 bits) packed in 16 (or a frequency of 0 there, and both in
// wide). hi[w] is the first posting whose document's high bits are w or
// more. The memory is reference-counted: the cache holds one reference,
// and each cursor reading the list another (acquire, release); the last
// release frees it. A cleanup frees it too if the list becomes
// unreachable while still counted, so that a missing release leaks
// nothing.
type decoded struct {
	n    int      // postings added
	lo   []uint16 // each posting's document, low 16 bits
	pk   []uint16 // tf<<12 | dl, or 0 when wide holds them
	hi   []uint32
	wide map[int][2]uint64
	mem  *offHeap
	refs atomic.Int32
}

// offHeap is a decoded list's memory, freed once.
type offHeap struct {
	b     []byte
	freed atomic.Bool
}

func (m *offHeap) free() {
	if m.freed.CompareAndSwap(false, true) {
		manual.Free(m.b)
	}
}

// newDecoded returns room for count postings, with one reference.
func newDecoded(count int) *decoded {
	m := &offHeap{b: manual.New(4 * count)}
	d := &decoded{mem: m}
	if count > 0 {
		d.lo = unsafe.Slice((*uint16)(unsafe.Pointer(&m.b[0])), count)
		d.pk = unsafe.Slice((*uint16)(unsafe.Pointer(&m.b[2*count])), count)
	}
	d.refs.Store(1)
	runtime.AddCleanup(d, (*offHeap).free, m)
	return d
}

// acquire adds a reference; release drops one, and frees the postings
// with the last.
func (d *decoded) acquire() { d.refs.Add(1) }

func (d *decoded) release() {
	if d != nil && d.refs.Add(-1) == 0 {
		d.lo, d.pk = nil, nil
		d.mem.free()
	}
}

// bytes is the memory d holds, as the cache counts it.
func (d *decoded) bytes() int { return 4*len(d.lo) + 4*len(d.hi) + 48*len(d.wide) }

// packable reports whether tf and dl fit a posting's 16 bits.
func packable(tf, dl uint64) bool { return tf >= 1 && tf <= 15 && dl <= 0xfff }

// add appends a posting, of a document after the last one's; false when
// the room newDecoded made is full.
func (d *decoded) add(doc uint32, tf, dl uint64) bool {
	i := d.n
	if i == len(d.lo) {
		return false
	}
	for w := int(doc >> 16); len(d.hi) <= w; {
		d.hi = append(d.hi, uint32(i))
	}
	d.lo[i] = uint16(doc)
	if packable(tf, dl) {
		d.pk[i] = uint16(tf<<12 | dl)
	} else {
		if d.wide == nil {
			d.wide = map[int][2]uint64{}
		}
		d.wide[i] = [2]uint64{tf, dl}
		d.pk[i] = 0
	}
	d.n++
	runtime.KeepAlive(d)
	return true
}

// at is posting i's frequency and length, as zap gives them.
func (d *decoded) at(i int) (tf, dl float64) {
	v := d.pk[i]
	runtime.KeepAlive(d)
	if v>>12 == 0 {
		w := d.wide[i]
		return float64(w[0]), float64(w[1])
	}
	return float64(v >> 12), float64(v & 0xfff)
}

// window returns the window (high 16 bits) of posting i, searching
// forward from w, a window at or before it.
func (d *decoded) window(i, w int) int {
	for w+1 < len(d.hi) && int(d.hi[w+1]) <= i {
		w++
	}
	return w
}

// doc is posting i's document, in window w (window(i, ...)).
func (d *decoded) doc(i, w int) uint64 {
	v := d.lo[i]
	runtime.KeepAlive(d)
	return uint64(w)<<16 | uint64(v)
}

// seek returns the first posting at or after i whose document is at or
// after doc (d.n if none): a galloping search from i within doc's window.
func (d *decoded) seek(i int, doc uint64) int {
	w := doc >> 16
	if w >= uint64(len(d.hi)) {
		return d.n
	}
	lo, end := max(i, int(d.hi[w])), d.n
	if w+1 < uint64(len(d.hi)) {
		end = int(d.hi[w+1])
	}
	if lo >= end {
		return lo
	}
	low := d.lo[:end]
	target := uint16(doc)
	hi, step := lo, 1
	for hi < end && low[hi] < target {
		lo = hi + 1
		hi += step
		step *= 2
	}
	j, _ := slices.BinarySearch(low[lo:min(hi+1, end)], target)
	runtime.KeepAlive(d)
	return lo + j
}

// blockCache keeps, for the segments of the last snapshot searched
// (retain), the blocks of the terms searched, up to maxBlockBytes (past
// that it starts again empty), and the decoded postings of those searched
// at least decodeAfter times, up to decodedBytes. A term searched once is
// only scanned for its blocks, and once the budget is full a term's
// postings are decoded only if it has been searched more often than the
// decoded list they would push out, the least searched of the least
// recently used (victim), with counts halved as they age: so that a
// stream of rare queries, or a cycle of queries wider than the budget,
// does not push out the postings that recur. It is safe for concurrent
// use.
type blockCache struct {
	mu         sync.Mutex
	m          map[blockKey]*termBlocks
	blockBytes int
	lru        list.List // of the *termBlocks holding decoded postings, most recently used first
	decBytes   int
	ticks      int               // lookups since the uses were last halved (age)
	last       []segment.Segment // the segments of the last retain
}

// termBlocks is what the cache keeps of one term in one segment.
type termBlocks struct {
	key    blockKey
	blocks []block
	count  uint64   // its postings, deleted documents included
	uses   int      // searches that asked for it
	post   *decoded // nil until decoded, or once dropped
	el     *list.Element
}

// maxBlockBytes bounds a blockCache's blocks: 16 bytes a block of 128
// postings, so 64 MiB covers the blocks of 537M postings.
const maxBlockBytes = 64 << 20

// decodedBytes bounds a blockCache's decoded postings (4 bytes a
// posting): about 84M postings. decodeAfter is the number of searches
// that ask for a term's blocks in a segment before its postings are
// decoded there. Variables for the tests.
var (
	decodedBytes = 320 << 20
	decodeAfter  = 2
)

// decodeShare is the largest share of decodedBytes one term's decoded
// postings may take: a longer list keeps only its blocks, and is read
// through zap.
const decodeShare = 8

// lookup returns the blocks and the decoded postings the cache holds for
// k, counting a use, and whether the postings should now be decoded: by
// the count the cache recorded, or, for a term it has not seen, by count.
func (c *blockCache) lookup(k blockKey, count uint64) (tb *termBlocks, post *decoded, decode bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.age()
	tb = c.m[k]
	if tb == nil {
		return nil, nil, decodeAfter <= 1 && fitsDecoded(count)
	}
	tb.uses++
	if tb.post != nil {
		c.lru.MoveToFront(tb.el)
		tb.post.acquire()
		return tb, tb.post, false
	}
	if tb.uses < decodeAfter || !fitsDecoded(tb.count) {
		return tb, nil, false
	}
	// Admission (as TinyLFU's): when the budget is full, only a term
	// searched more often than the one it would push out.
	if v := c.victim(); c.decBytes+4*int(tb.count) > decodedBytes && v != nil && v.uses >= tb.uses {
		return tb, nil, false
	}
	return tb, nil, true
}

// evictSample is how many of the least recently used decoded lists
// eviction chooses among: the one searched least often goes.
const evictSample = 8

// victim is the decoded list eviction would drop next (nil: none).
func (c *blockCache) victim() *termBlocks {
	var v *termBlocks
	e := c.lru.Back()
	for i := 0; i < evictSample && e != nil; i++ {
		if tb := e.Value.(*termBlocks); v == nil || tb.uses < v.uses {
			v = tb
		}
		e = e.Prev()
	}
	return v
}

// age halves every term's count of uses once the cache has counted
// 16 uses a term since the last halving, so that counts follow what
// is searched now.
func (c *blockCache) age() {
	if c.ticks++; c.ticks < 16*len(c.m)+1024 {
		return
	}
	c.ticks = 0
	for _, tb := range c.m {
		tb.uses /= 2
	}
}

// fitsDecoded reports whether a list of count postings may be decoded.
func fitsDecoded(count uint64) bool {
	return count <= math.MaxUint32 && 4*count <= uint64(decodedBytes/decodeShare)
}

// put records blocks, of count postings, and the decoded postings (nil:
// none), for k. The cache takes a reference to the postings it keeps.
func (c *blockCache) put(k blockKey, blocks []block, count uint64, post *decoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tb := c.m[k]
	if tb == nil {
		if c.m == nil || c.blockBytes+16*len(blocks) > maxBlockBytes {
			c.clearLocked()
		}
		tb = &termBlocks{key: k, blocks: blocks, count: count, uses: 1}
		c.m[k] = tb
		c.blockBytes += 16 * len(blocks)
	}
	if post == nil || tb.post != nil {
		return
	}
	n := post.bytes()
	if n > decodedBytes/decodeShare {
		return // wide values made it larger than its count said
	}
	for c.decBytes+n > decodedBytes && c.lru.Len() > 0 {
		c.dropDecoded(c.victim())
	}
	if c.decBytes+n > decodedBytes {
		return
	}
	post.acquire()
	tb.post = post
	tb.el = c.lru.PushFront(tb)
	c.decBytes += n
}

func (c *blockCache) dropDecoded(tb *termBlocks) {
	c.decBytes -= tb.post.bytes()
	c.lru.Remove(tb.el)
	tb.post.release()
	tb.post, tb.el = nil, nil
}

func (c *blockCache) clearLocked() {
	for e := c.lru.Front(); e != nil; e = e.Next() {
		tb := e.Value.(*termBlocks)
		tb.post.release()
		tb.post, tb.el = nil, nil
	}
	c.m, c.blockBytes = map[blockKey]*termBlocks{}, 0
	c.lru.Init()
	c.decBytes = 0
}

// size is the memory the cache holds, as it counts it: blocks and
// decoded postings.
func (c *blockCache) size() (blocks, decoded int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blockBytes, c.decBytes
}

// retain drops the entries of the segments segs does not hold (nil: all).
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
	for k, tb := range c.m {
		if !keep[k.seg] {
			if tb.post != nil {
				c.dropDecoded(tb)
			}
			delete(c.m, k)
			c.blockBytes -= 16 * len(tb.blocks)
		}
	}
}

// blocks returns the blocks of term in field of the segment ss, from the
// cache or computed from every posting, deleted documents included, and
// its postings decoded (nil: read them through zap) when the cache holds
// them or they are now due (lookup), with a reference the caller
// releases. live is the number of its live postings.
func (c *blockCache) blocks(ss *scorch.SegmentSnapshot, field, term string, live uint64) ([]block, *decoded, error) {
	k := blockKey{seg: ss.Segment(), field: field, term: term}
	tb, post, decode := c.lookup(k, live)
	if tb != nil && !decode {
		return tb.blocks, post, nil
	}
	dict, err := ss.Segment().Dictionary(field)
	if err != nil {
		return nil, nil, err
	}
	pl, err := dict.PostingsList([]byte(term), nil, nil)
	if err != nil {
		return nil, nil, err
	}
	count := pl.Count()
	if decode && fitsDecoded(count) {
		post = newDecoded(int(count))
	}
	var out []block
	cur := block{minDL: math.MaxUint32}
	n := 0
	it := pl.Iterator(true, true, false, nil)
	for {
		p, err := it.Next()
		if err != nil {
			post.release()
			return nil, nil, err
		}
		if p == nil {
			break
		}
		tf, dl := p.Frequency(), postingDL(p)
		if post != nil && !post.add(uint32(p.Number()), tf, dl) {
			post.release() // more postings than Count said: read them through zap
			post = nil
		}
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
	c.put(k, out, count, post)
	return out, post, nil
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

// cursor walks one term's postings in one segment: its decoded postings
// when the cache holds them (which include deleted documents), else
// zap's iterator (which skips them).
type cursor struct {
	ti      int // the term's place among the query's terms
	it      segment.PostingsIterator
	dec     *decoded
	pos     int    // the current posting in dec
	win     int    // the window (high 16 bits) of the document at pos, or one before it
	doc     uint64 // the current posting's document, noDoc at the end
	tf, dl  float64
	w, c1   float64
	blocks  []block
	bi      int     // the block holding doc or the last document asked about
	max     float64 // the largest bound of its blocks
	bound   float64 // the bound of the block of the last bound call
	boundOf int     // 1 + the block whose bound c.bound is (0: none yet)
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

// load reads the decoded posting at c.pos.
func (c *cursor) load() {
	if c.pos >= c.dec.n {
		c.doc = noDoc
		return
	}
	c.win = c.dec.window(c.pos, c.win)
	c.doc = c.dec.doc(c.pos, c.win)
	c.tf, c.dl = c.dec.at(c.pos)
}

func (c *cursor) next() error {
	if c.dec != nil {
		c.pos++
		c.load()
		return nil
	}
	return c.read(c.it.Next())
}

// advance moves to the first posting at or after d.
func (c *cursor) advance(d uint64) error {
	if c.doc >= d {
		return nil
	}
	if c.dec != nil {
		c.pos = c.dec.seek(c.pos, d)
		c.load()
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
	if c.boundOf != c.bi+1 {
		c.bound, c.boundOf = c.blockBound(c.blocks[c.bi], c0), c.bi+1
	}
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
		err := func() error {
			var cs []*cursor
			defer func() {
				for _, c := range cs {
					c.dec.release()
				}
			}()
			var deleted *roaring.Bitmap // to test candidates against, when a cursor reads decoded postings
			for ti, t := range terms {
				if t.lists[i] == nil {
					continue
				}
				c := &cursor{ti: ti, w: t.w, c1: t.c1, blocks: unbounded}
				cs = append(cs, c) // before blocks, so that its postings are released
				if t.lists[i].Count() >= blocksFrom {
					var err error
					if c.blocks, c.dec, err = blocks.blocks(ss, clauses[t.clause].field, clauses[t.clause].term, t.lists[i].Count()); err != nil {
						return fmt.Errorf("sparse: BM25 blocks: %w", err)
					}
				}
				for _, b := range c.blocks {
					c.max = max(c.max, c.blockBound(b, c0))
				}
				if c.dec != nil {
					c.pos = -1
					if d := ss.Deleted(); allow == nil && d != nil && !d.IsEmpty() {
						deleted = d
					}
				} else {
					c.it = t.lists[i].Iterator(true, true, false, nil)
				}
				if err := c.next(); err != nil {
					return err
				}
			}
			if len(cs) == 0 {
				return nil
			}
			return scoreSegment(ctx, cs, c0, allow, deleted, segBase, top, theta, parts)
		}()
		if err != nil {
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
// Documents in deleted (nil: none), which decoded postings still hold,
// are passed over as allow's absent ones are.
func scoreSegment(ctx context.Context, cs []*cursor, c0 float64, allow, deleted *roaring.Bitmap, base uint64, top *topK, theta func() float64, parts []float64) error {
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
		if deleted != nil && deleted.Contains(uint32(d)) {
			for _, c := range cs[essential:] {
				if err := c.advance(d + 1); err != nil {
					return err
				}
			}
			continue
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
