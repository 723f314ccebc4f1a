package sparse

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/blevesearch/bleve/v2/index/scorch"
	segment "github.com/blevesearch/scorch_segment_api/v2"
)

// docNumCache maps a segment's document numbers to Tandem document
// numbers (the Bleve document ids, parsed), so that FilterBitmap need
// not look up and parse each match's id. A segment never changes: the
// document at a number in it is the same in every snapshot that holds
// the segment (deletion only marks it in the snapshot), so an entry is
// valid for the segment's life, and the cache keeps only the segments
// of the snapshot it was last asked about (retain).
//
// It is safe for concurrent use.
type docNumCache struct {
	mu   sync.Mutex
	segs map[segment.Segment]*segDocNums
}

// segDocNums holds one segment's document numbers, each plus one, by
// the segment's number for the document: 0 is one not read yet. An
// entry is read from the segment's stored id on the first call that
// needs it, then kept: 8 bytes for each document of the segment,
// deleted ones included, allocated when the segment is first asked
// about, and filled only where a filter matched.
type segDocNums struct {
	seg  segment.Segment
	nums []atomic.Uint64
}

// segment returns the entry of seg, made empty if the cache has none.
func (c *docNumCache) segment(seg segment.Segment) *segDocNums {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.segs[seg]; s != nil {
		return s
	}
	if c.segs == nil {
		c.segs = map[segment.Segment]*segDocNums{}
	}
	s := &segDocNums{seg: seg, nums: make([]atomic.Uint64, seg.Count())}
	c.segs[seg] = s
	return s
}

// retain drops the entries of every segment that segs (a snapshot's)
// does not hold: a merge replaces segments, and a persisted segment
// replaces the in-memory one of a batch. A search on an older snapshot
// may drop a newer segment's entry, which the next search makes again.
// Close drops every entry (segs nil), and with them the segments.
func (c *docNumCache) retain(segs []*scorch.SegmentSnapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.segs) == 0 {
		return
	}
	keep := make(map[segment.Segment]bool, len(segs))
	for _, ss := range segs {
		keep[ss.Segment()] = true
	}
	for seg := range c.segs {
		if !keep[seg] {
			delete(c.segs, seg)
		}
	}
}

// size is the number of documents the cache has room for.
func (c *docNumCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.segs {
		n += len(s.nums)
	}
	return n
}

// docNum returns the document number of the segment's document local.
func (s *segDocNums) docNum(local uint64) (uint64, error) {
	if local >= uint64(len(s.nums)) {
		return 0, fmt.Errorf("sparse: document %d of a segment of %d", local, len(s.nums))
	}
	if v := s.nums[local].Load(); v != 0 {
		return v - 1, nil
	}
	id, err := s.seg.DocID(local)
	if err != nil {
		return 0, fmt.Errorf("sparse: id of document %d of a segment: %w", local, err)
	}
	n, ok := parseDocID(id)
	if !ok {
		return 0, fmt.Errorf("sparse: bad document id %q in index", id)
	}
	if n != math.MaxUint64 { // which plus one would read as unread
		s.nums[local].Store(n + 1)
	}
	return n, nil
}

// parseDocID reads a document id (DocID) as strconv.ParseUint would in
// base 10, without converting it to a string.
func parseDocID(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false // overflows
		}
		n = n*10 + d
	}
	return n, true
}
