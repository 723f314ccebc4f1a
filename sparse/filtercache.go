package sparse

import (
	"context"
	"encoding/binary"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/blevesearch/bleve/v2/index/scorch"
	segment "github.com/blevesearch/scorch_segment_api/v2"
)

// filterCache keeps, per segment and compiled filter, the segment's
// documents the filter matches, deleted ones included, and their
// document numbers: what FilterBitmap would otherwise work out again for
// each search, a document number at a time. A segment never changes, so
// an entry holds for the segment's life; each search removes the
// documents its snapshot has deleted since. It keeps the segments of the
// snapshot it was last asked about (retain), up to maxFilterBytes, past
// which it starts again empty. It is safe for concurrent use.
type filterCache struct {
	mu    sync.Mutex
	m     map[filterKey]*filterEntry
	bytes int
}

type filterKey struct {
	seg    segment.Segment
	filter string // bitmapFilter.key
}

type filterEntry struct {
	local *roaring.Bitmap   // the segment's documents matched
	nums  *roaring64.Bitmap // their document numbers
}

func (e *filterEntry) size() int {
	return int(e.local.GetSizeInBytes() + e.nums.GetSizeInBytes())
}

// maxFilterBytes bounds a filterCache: a 1% filter of a 5M-document
// collection takes about 100 KB.
const maxFilterBytes = 64 << 20

func (c *filterCache) get(k filterKey) *filterEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *filterCache) put(k filterKey, e *filterEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := e.size()
	if c.m == nil || c.bytes+n > maxFilterBytes {
		c.m, c.bytes = map[filterKey]*filterEntry{}, 0
	}
	if n > maxFilterBytes {
		return
	}
	if _, ok := c.m[k]; !ok {
		c.m[k] = e
		c.bytes += n
	}
}

// retain drops the entries of every segment segs does not hold (nil:
// all).
func (c *filterCache) retain(segs []*scorch.SegmentSnapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) == 0 {
		return
	}
	keep := make(map[segment.Segment]bool, len(segs))
	for _, ss := range segs {
		keep[ss.Segment()] = true
	}
	for k, e := range c.m {
		if !keep[k.seg] {
			delete(c.m, k)
			c.bytes -= e.size()
		}
	}
}

// key is an encoding of b that two filters share only if they match the
// same documents by the same terms: every operation, field, term and
// range bound, each length-prefixed.
func (b *bitmapFilter) key(buf []byte) []byte {
	str := func(s []byte) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	buf = binary.AppendUvarint(buf, uint64(b.op))
	str([]byte(b.field))
	buf = binary.AppendUvarint(buf, uint64(len(b.terms)))
	for _, t := range b.terms {
		str(t)
	}
	buf = binary.AppendUvarint(buf, uint64(len(b.ranges)))
	for _, r := range b.ranges {
		str(r.start)
		if r.end == nil {
			buf = append(buf, 0)
		} else {
			buf = append(buf, 1)
			str(r.end)
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(b.kids)))
	for _, k := range b.kids {
		buf = k.key(buf)
	}
	return buf
}

// segmentMatches returns the document numbers of ss's live documents
// that bf matches, from the cache or worked out and cached. The result
// may be the cache's own bitmap: the caller must not change it.
func (x *Index) segmentMatches(ctx context.Context, ss *scorch.SegmentSnapshot, bf *bitmapFilter, key string, f *segmentFilter) (*roaring64.Bitmap, error) {
	k := filterKey{seg: ss.Segment(), filter: key}
	e := x.filters.get(k)
	if e == nil {
		local, err := f.matches(ss.Segment(), bf)
		if err != nil {
			return nil, err
		}
		b := &docNumBitmap{}
		if err := b.add(ctx, x.docNums.segment(ss.Segment()), local); err != nil {
			return nil, err
		}
		e = &filterEntry{local: local, nums: b.bitmap()}
		x.filters.put(k, e)
	}
	d := ss.Deleted()
	if d == nil || !e.local.Intersects(d) {
		return e.nums, nil
	}
	gone := roaring.And(e.local, d)
	nums := e.nums.Clone()
	seg := x.docNums.segment(ss.Segment())
	it := gone.Iterator()
	for it.HasNext() {
		num, err := seg.docNum(uint64(it.Next()))
		if err != nil {
			return nil, err
		}
		nums.Remove(num)
	}
	return nums, nil
}
