package sparse

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/numeric"
	segment "github.com/blevesearch/scorch_segment_api/v2"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

// bitmapFilter is a filter compiled for FilterBitmap: the terms whose
// postings hold its clauses' documents, and how to combine them. It
// matches exactly what Compile's query matches: the same terms, read
// from the postings instead of through Bleve's searchers.
type bitmapFilter struct {
	op     bitmapOp
	field  string
	terms  [][]byte        // opTerms
	ranges []termRange     // opRanges
	kids   []*bitmapFilter // opAnd, opOr, opNot
}

type bitmapOp int

const (
	opTerms  bitmapOp = iota // the documents holding any of terms in field
	opRanges                 // the documents holding a term of field in any of ranges
	opAnd                    // the documents every kid matches; all of them when none
	opOr                     // the documents any kid matches; none when none
	opNot                    // the documents kids[0] does not match
)

// termRange is the terms from start (inclusive) to end (exclusive; nil
// for no end), in the dictionary's order.
type termRange struct{ start, end []byte }

// compileBitmap compiles a checked filter for FilterBitmap, looking at
// ctx at every node, with Compile's errors.
func compileBitmap(ctx context.Context, e filter.Expr, schema *tandem.Schema) (*bitmapFilter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch x := e.(type) {
	case *filter.Term:
		f, err := fieldOf(schema, x.Field)
		if err != nil {
			return nil, err
		}
		return equalsBitmap(f, x.Value)
	case *filter.Terms:
		f, err := fieldOf(schema, x.Field)
		if err != nil {
			return nil, err
		}
		// Every value of one field compiles to the same op: their union
		// is the union of their terms or ranges.
		out := &bitmapFilter{op: opTerms, field: f.Name}
		for _, v := range x.Values {
			b, err := equalsBitmap(f, v)
			if err != nil {
				return nil, err
			}
			out.op = b.op
			out.terms = append(out.terms, b.terms...)
			out.ranges = append(out.ranges, b.ranges...)
		}
		return out, nil
	case *filter.Range:
		f, err := fieldOf(schema, x.Field)
		if err != nil {
			return nil, err
		}
		lo, loIncl, hi, hiIncl := x.Bounds()
		return rangeBitmap(f, lo, hi, loIncl, hiIncl)
	case *filter.Prefix:
		return &bitmapFilter{op: opRanges, field: x.Field, ranges: []termRange{{[]byte(x.Prefix), prefixEnd([]byte(x.Prefix))}}}, nil
	case *filter.Exists:
		return &bitmapFilter{op: opTerms, field: existsField, terms: [][]byte{[]byte(x.Field)}}, nil
	case *filter.And:
		return compileBitmaps(ctx, opAnd, x.Exprs, schema)
	case *filter.Or:
		return compileBitmaps(ctx, opOr, x.Exprs, schema)
	case *filter.Not:
		return compileBitmaps(ctx, opNot, []filter.Expr{x.Expr}, schema)
	}
	return nil, fmt.Errorf("sparse: unknown filter expression %T", e)
}

// compileBitmaps compiles the operands of op.
func compileBitmaps(ctx context.Context, op bitmapOp, es []filter.Expr, schema *tandem.Schema) (*bitmapFilter, error) {
	out := &bitmapFilter{op: op, kids: make([]*bitmapFilter, len(es))}
	for i, e := range es {
		var err error
		if out.kids[i], err = compileBitmap(ctx, e, schema); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// equalsBitmap is equals for FilterBitmap: a keyword is its own term, a
// bool the term "T" or "F" (as Bleve indexes a boolean field and its
// BoolFieldQuery searches it), a number or date the range of that value.
func equalsBitmap(f tandem.Field, v filter.Value) (*bitmapFilter, error) {
	switch f.Type {
	case tandem.Keyword, tandem.Keywords:
		if s, ok := v.(string); ok {
			return &bitmapFilter{op: opTerms, field: f.Name, terms: [][]byte{[]byte(s)}}, nil
		}
	case tandem.Bool:
		if b, ok := v.(bool); ok {
			term := "F"
			if b {
				term = "T"
			}
			return &bitmapFilter{op: opTerms, field: f.Name, terms: [][]byte{[]byte(term)}}, nil
		}
	case tandem.Number, tandem.Date:
		return rangeBitmap(f, v, v, true, true)
	}
	return nil, &filter.Error{Path: f.Name, Msg: fmt.Sprintf("value %v does not suit a %s field (was the filter checked?)", v, f.Type)}
}

// rangeBitmap is rangeQuery for FilterBitmap: the same bounds, read the
// way Bleve's numeric range searcher reads them, and the same terms.
func rangeBitmap(f tandem.Field, lo, hi filter.Value, loIncl, hiIncl bool) (*bitmapFilter, error) {
	min, max, err := rangeFloats(f, lo, hi)
	if err != nil {
		return nil, err
	}
	from, to := int64Bounds(min, max, loIncl, hiIncl)
	return &bitmapFilter{op: opRanges, field: f.Name, ranges: trieRanges(from, to)}, nil
}

// trieRanges returns the ranges of prefix-coded terms whose documents are
// exactly those with a value from lo to hi (inclusive; none when lo >
// hi). Bleve indexes a number or a date (as int64, numeric.Float64ToInt64
// or nanoseconds) as one term per shift of its bits by a multiple of
// document.DefaultPrecisionStep, each term standing for the block of
// values that share its bits, so a range is whole blocks of coarse terms
// in its middle and the finer terms of its ragged ends. This is the split
// of Lucene's NumericUtils.splitRange, as Bleve's numeric range searcher
// makes it (splitInt64Range); where that searcher then enumerates every
// possible term of each range byte by byte (see numericRange), FilterBitmap
// walks the dictionary between the range's ends.
func trieRanges(lo, hi int64) []termRange {
	const step = document.DefaultPrecisionStep
	var out []termRange
	add := func(lo, hi int64, shift uint) {
		end := numeric.MustNewPrefixCodedInt64(hi, shift)
		// The first key after end: the terms of a shift are all as long.
		out = append(out, termRange{numeric.MustNewPrefixCodedInt64(lo, shift), append(end, 0)})
	}
	if lo > hi {
		return nil
	}
	for shift := uint(0); ; shift += step {
		diff := int64(1) << (shift + step)
		mask := (int64(1)<<step - 1) << shift
		hasLower, hasUpper := lo&mask != 0, hi&mask != mask
		nextLo, nextHi := lo&^mask, hi&^mask
		if hasLower {
			nextLo = (lo + diff) &^ mask
		}
		if hasUpper {
			nextHi = (hi - diff) &^ mask
		}
		// At the coarsest shift, or when the next is empty or wraps
		// around, this shift's range is the rest.
		if shift+step >= 64 || nextLo > nextHi || nextLo < lo || nextHi > hi {
			add(lo, hi, shift)
			return out
		}
		if hasLower {
			add(lo, lo|mask, shift)
		}
		if hasUpper {
			add(hi&^mask, hi, shift)
		}
		lo, hi = nextLo, nextHi
	}
}

// segmentFilter evaluates a bitmapFilter in one segment, as the bitmap
// of its matching documents, deleted ones included: And, Or and Not act
// on each document alone, so removing the deleted documents from the
// result is the same as from every clause's.
type segmentFilter struct {
	ctx   context.Context
	seg   segment.Segment
	dicts map[string]segment.TermDictionary // of seg, by field
	pr    postingsReader
}

// eval returns the segment's documents matching b. It looks at the
// context at each node, and every prefixCheckEvery terms of a range.
func (f *segmentFilter) eval(b *bitmapFilter) (*roaring.Bitmap, error) {
	if err := f.ctx.Err(); err != nil {
		return nil, err
	}
	switch b.op {
	case opTerms, opRanges:
		dict, err := f.dict(b.field)
		if err != nil {
			return nil, err
		}
		bm := roaring.New()
		for _, t := range b.terms {
			if err := f.pr.termInto(dict, t, bm); err != nil {
				return nil, fmt.Errorf("sparse: filter field %s: %w", b.field, err)
			}
		}
		for _, r := range b.ranges {
			if err := f.pr.rangeInto(f.ctx, dict, r.start, r.end, bm); err != nil {
				if f.ctx.Err() != nil {
					return nil, err
				}
				return nil, fmt.Errorf("sparse: filter field %s: terms from %q: %w", b.field, r.start, err)
			}
		}
		return bm, nil
	case opAnd:
		if len(b.kids) == 0 {
			return f.all(), nil
		}
		var bm *roaring.Bitmap
		for _, k := range b.kids {
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
	case opOr:
		bm := roaring.New()
		for _, k := range b.kids {
			kb, err := f.eval(k)
			if err != nil {
				return nil, err
			}
			bm.Or(kb)
		}
		return bm, nil
	case opNot:
		kb, err := f.eval(b.kids[0])
		if err != nil {
			return nil, err
		}
		bm := f.all()
		bm.AndNot(kb)
		return bm, nil
	}
	return nil, fmt.Errorf("sparse: filter op %d", b.op)
}

// all is every document of the segment.
func (f *segmentFilter) all() *roaring.Bitmap {
	bm := roaring.New()
	bm.AddRange(0, f.seg.Count())
	return bm
}

// dict returns the segment's dictionary of field.
func (f *segmentFilter) dict(field string) (segment.TermDictionary, error) {
	if d, ok := f.dicts[field]; ok {
		return d, nil
	}
	d, err := f.seg.Dictionary(field)
	if err != nil {
		return nil, fmt.Errorf("sparse: filter field %s: %w", field, err)
	}
	if f.dicts == nil {
		f.dicts = map[string]segment.TermDictionary{}
	}
	f.dicts[field] = d
	return d, nil
}

// matches returns the documents of seg that b matches, deleted ones
// included, by their numbers in the segment.
func (f *segmentFilter) matches(seg segment.Segment, b *bitmapFilter) (*roaring.Bitmap, error) {
	f.seg = seg
	clear(f.dicts)
	return f.eval(b)
}

// live returns the live documents of ss that b matches, by their
// numbers in the segment.
func (f *segmentFilter) live(ss *scorch.SegmentSnapshot, b *bitmapFilter) (*roaring.Bitmap, error) {
	bm, err := f.matches(ss.Segment(), b)
	if err != nil {
		return nil, err
	}
	if d := ss.Deleted(); d != nil {
		bm.AndNot(d)
	}
	return bm, nil
}

// docNumBitmap collects document numbers, to make a bitmap of them.
type docNumBitmap struct {
	nums []uint64 // in the order added
	max  uint64   // of nums
}

// add adds the document numbers of the segment's documents in bm.
func (b *docNumBitmap) add(ctx context.Context, nums *segDocNums, bm *roaring.Bitmap) error {
	buf := make([]uint32, 1024)
	b.nums = slices.Grow(b.nums, int(bm.GetCardinality()))
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
			b.nums = append(b.nums, num)
			b.max = max(b.max, num)
		}
	}
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
