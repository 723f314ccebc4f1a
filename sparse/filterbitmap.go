package sparse

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"
	segment "github.com/blevesearch/scorch_segment_api/v2"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

// docNumBitmap collects the document numbers of a filter's matches in
// one snapshot (segs), given as segment documents.
type docNumBitmap struct {
	cache *docNumCache
	segs  []*scorch.SegmentSnapshot
	nums  []uint64 // in the order of the segments' documents
	max   uint64   // of nums
}

// add adds the document number of the segment's document local.
func (b *docNumBitmap) add(ctx context.Context, nums *segDocNums, local uint64) error {
	if len(b.nums)%guardEvery == guardEvery-1 {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	num, err := nums.docNum(local)
	if err != nil {
		return err
	}
	b.nums = append(b.nums, num)
	b.max = max(b.max, num)
	return nil
}

// bitmap returns the numbers added as a bitmap. A segment holds its
// documents in the order they were merged, not by number, and a roaring
// bitmap takes numbers out of order at the cost of shifting an array
// for each: so when the numbers are dense enough, a bitset from 0 to the
// largest of them being at most 4 times as large as their list, they are
// set in a bitset, which roaring takes in a block at a time; otherwise
// they are sorted first.
func (b *docNumBitmap) bitmap() *roaring64.Bitmap {
	if b.max <= math.MaxUint32 && b.max/64 < 4*uint64(len(b.nums)) {
		words := make([]uint64, b.max/64+1)
		for _, n := range b.nums {
			words[n/64] |= 1 << (n % 64)
		}
		return roaring64.Roaring32AsRoaring64(roaring.FromDense(words, true))
	}
	slices.Sort(b.nums)
	bm := roaring64.New()
	bm.AddMany(b.nums)
	return bm
}

// addSearcher adds the matches of q's unscored searcher over r, the
// snapshot of b.segs.
func (b *docNumBitmap) addSearcher(ctx context.Context, r index.IndexReader, m mapping.IndexMapping, q query.Query) error {
	s, err := q.Searcher(ctx, r, m, search.SearcherOptions{Score: "none"})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("sparse: filter: %w", err)
	}
	defer s.Close()
	// Scorch numbers a snapshot's documents segment after segment, each
	// segment counting its deleted documents too; the searcher yields
	// them in that order.
	starts := make([]uint64, len(b.segs)+1)
	for i, ss := range b.segs {
		starts[i+1] = starts[i] + ss.Segment().Count()
	}
	var nums *segDocNums
	si := -1
	sctx := &search.SearchContext{DocumentMatchPool: search.NewDocumentMatchPool(s.DocumentMatchPoolSize(), 0)}
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		dm, err := s.Next(sctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("sparse: filter: %w", err)
		}
		if dm == nil {
			return nil
		}
		if len(dm.IndexInternalID) != 8 {
			return fmt.Errorf("sparse: filter: internal id of %d bytes, want 8", len(dm.IndexInternalID))
		}
		g := binary.BigEndian.Uint64(dm.IndexInternalID)
		sctx.DocumentMatchPool.Put(dm)
		if si < 0 || g < starts[si] || g >= starts[si+1] {
			si = sort.Search(len(b.segs), func(i int) bool { return starts[i+1] > g })
			if si == len(b.segs) {
				return fmt.Errorf("sparse: filter: internal id %d past the snapshot's %d documents", g, starts[len(b.segs)])
			}
			nums = b.cache.segment(b.segs[si].Segment())
		}
		if err := b.add(ctx, nums, g-starts[si]); err != nil {
			return err
		}
	}
}

// postingsOnly reports whether every clause of e is a term or terms of a
// keyword, keywords or bool field, a prefix or an exists: a filter that
// is a set of terms in each segment, and unions, intersections and
// complements of those sets, which addPostings computes on the segments'
// postings bitmaps. A number or date clause is a numeric range over
// Bleve's prefix-coded terms, which its searcher enumerates.
func postingsOnly(e filter.Expr, schema *tandem.Schema) bool {
	switch x := e.(type) {
	case *filter.Term:
		return termField(schema, x.Field)
	case *filter.Terms:
		return termField(schema, x.Field)
	case *filter.Prefix, *filter.Exists:
		return true
	case *filter.And:
		return allPostingsOnly(x.Exprs, schema)
	case *filter.Or:
		return allPostingsOnly(x.Exprs, schema)
	case *filter.Not:
		return postingsOnly(x.Expr, schema)
	}
	return false
}

func allPostingsOnly(es []filter.Expr, schema *tandem.Schema) bool {
	for _, e := range es {
		if !postingsOnly(e, schema) {
			return false
		}
	}
	return true
}

// termField reports whether a term of field name is one indexed term, as
// equals compiles it.
func termField(schema *tandem.Schema, name string) bool {
	f, ok := schema.Field(name)
	return ok && (f.Type == tandem.Keyword || f.Type == tandem.Keywords || f.Type == tandem.Bool)
}

// addPostings adds the documents matching e, a postingsOnly filter,
// evaluated segment by segment over the postings.
func (b *docNumBitmap) addPostings(ctx context.Context, schema *tandem.Schema, e filter.Expr) error {
	f := &segmentFilter{ctx: ctx, schema: schema}
	buf := make([]uint32, 1024)
	for _, ss := range b.segs {
		f.seg = ss.Segment()
		clear(f.dicts)
		bm, err := f.eval(e)
		if err != nil {
			return err
		}
		if d := ss.Deleted(); d != nil {
			bm.AndNot(d)
		}
		if bm.IsEmpty() {
			continue
		}
		nums := b.cache.segment(f.seg)
		b.nums = slices.Grow(b.nums, int(bm.GetCardinality()))
		it := bm.ManyIterator()
		for n := it.NextMany(buf); n > 0; n = it.NextMany(buf) {
			for _, local := range buf[:n] {
				if err := b.add(ctx, nums, uint64(local)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// segmentFilter evaluates a postingsOnly filter in one segment, as the
// bitmap of its matching documents, deleted ones included: And, Or and
// Not act on each document alone, so removing the deleted documents
// from the result is the same as from every clause's.
type segmentFilter struct {
	ctx    context.Context
	schema *tandem.Schema
	seg    segment.Segment
	dicts  map[string]segment.TermDictionary // of seg, by field
	pr     postingsReader
}

// eval returns the segment's documents matching e. It looks at the
// context at each clause, and every prefixCheckEvery terms of a prefix.
func (f *segmentFilter) eval(e filter.Expr) (*roaring.Bitmap, error) {
	if err := f.ctx.Err(); err != nil {
		return nil, err
	}
	switch x := e.(type) {
	case *filter.Term:
		return f.terms(x.Field, []filter.Value{x.Value})
	case *filter.Terms:
		return f.terms(x.Field, x.Values)
	case *filter.Exists:
		bm := roaring.New()
		return bm, f.termInto(existsField, []byte(x.Field), bm)
	case *filter.Prefix:
		bm := roaring.New()
		return bm, f.pr.prefixInto(f.ctx, f.seg, x.Field, []byte(x.Prefix), bm)
	case *filter.And:
		if len(x.Exprs) == 0 {
			return f.all(), nil
		}
		var bm *roaring.Bitmap
		for _, k := range x.Exprs {
			kb, err := f.eval(k)
			if err != nil {
				return nil, err
			}
			if bm == nil {
				bm = kb
			} else {
				bm.And(kb)
			}
			if bm.IsEmpty() {
				break
			}
		}
		return bm, nil
	case *filter.Or:
		bm := roaring.New()
		for _, k := range x.Exprs {
			kb, err := f.eval(k)
			if err != nil {
				return nil, err
			}
			bm.Or(kb)
		}
		return bm, nil
	case *filter.Not:
		kb, err := f.eval(x.Expr)
		if err != nil {
			return nil, err
		}
		bm := f.all()
		bm.AndNot(kb)
		return bm, nil
	}
	return nil, fmt.Errorf("sparse: filter %v is not one of terms", e)
}

// all is every document of the segment.
func (f *segmentFilter) all() *roaring.Bitmap {
	bm := roaring.New()
	bm.AddRange(0, f.seg.Count())
	return bm
}

// terms returns the segment's documents whose field holds any of values,
// each the term equals makes of it: a keyword itself, a bool "T" or "F".
func (f *segmentFilter) terms(field string, values []filter.Value) (*roaring.Bitmap, error) {
	bm := roaring.New()
	for _, v := range values {
		var term []byte
		switch v := v.(type) {
		case string:
			term = []byte(v)
		case bool:
			term = []byte("F")
			if v {
				term = []byte("T")
			}
		default:
			return nil, &filter.Error{Path: field, Msg: fmt.Sprintf("value %v is not a term (was the filter checked?)", v)}
		}
		if err := f.termInto(field, term, bm); err != nil {
			return nil, err
		}
	}
	return bm, nil
}

// termInto adds the segment's documents holding term in field to bm.
func (f *segmentFilter) termInto(field string, term []byte, bm *roaring.Bitmap) error {
	dict, ok := f.dicts[field]
	if !ok {
		var err error
		if dict, err = f.seg.Dictionary(field); err != nil {
			return fmt.Errorf("sparse: filter field %s: %w", field, err)
		}
		if f.dicts == nil {
			f.dicts = map[string]segment.TermDictionary{}
		}
		f.dicts[field] = dict
	}
	if err := f.pr.termInto(dict, term, bm); err != nil {
		return fmt.Errorf("sparse: filter field %s: %w", field, err)
	}
	return nil
}
