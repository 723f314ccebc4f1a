package sparse

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"sort"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"
	segment "github.com/blevesearch/scorch_segment_api/v2"
)

// prefixQuery is a filter's prefix clause: the documents holding a term
// of field that starts with prefix, unscored. Bleve's prefix query builds
// a term searcher for every such term, reading its postings in every
// segment, before its first match and without a look at the context: 46
// µs a term over the segments of a 200,000-document collection, so a
// single short prefix of a keyword field with a million values costs tens
// of seconds that no deadline interrupts. This one unites, segment by
// segment, the postings of the terms it finds in that segment's
// dictionary, looking at the context every prefixCheckEvery terms.
type prefixQuery struct {
	field, prefix string
}

// prefixCheckEvery is how many terms prefixQuery's searcher reads between
// two looks at the context.
const prefixCheckEvery = 256

// orInto is what zap's postings lists offer beyond segment.PostingsList:
// their documents added to a bitmap at once, the deleted ones included.
type orInto interface {
	OrInto(*roaring.Bitmap)
}

func (q *prefixQuery) Searcher(ctx context.Context, r index.IndexReader, m mapping.IndexMapping, opts search.SearcherOptions) (search.Searcher, error) {
	snap, ok := r.(postingsSnapshot)
	if !ok { // not scorch: Bleve's own, which ignores the context
		pq := query.NewPrefixQuery(q.prefix)
		pq.SetField(q.field)
		return pq.Searcher(ctx, r, m, opts)
	}
	s := &listSearcher{}
	if err := s.prefix(ctx, snap, q.field, []byte(q.prefix)); err != nil {
		return nil, err
	}
	return s, nil
}

// prefix fills s with the documents holding a term of field that starts
// with prefix, in document order.
func (s *listSearcher) prefix(ctx context.Context, snap postingsSnapshot, field string, prefix []byte) error {
	var pr postingsReader
	seg := roaring.New()
	base := uint64(0)
	for _, ss := range snap.Segments() {
		seg.Clear()
		if err := pr.prefixInto(ctx, ss.Segment(), field, prefix, seg); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d := ss.Deleted(); d != nil {
			seg.AndNot(d) // OrInto adds the deleted documents too
		}
		for docs := seg.Iterator(); docs.HasNext(); {
			s.docs = append(s.docs, base+uint64(docs.Next()))
		}
		// Scorch numbers a snapshot's documents segment after segment,
		// each segment counting its deleted documents too.
		base += ss.Segment().Count()
	}
	return nil
}

// postingsReader reads postings lists into bitmaps, reusing its list and
// iterator from one term to the next. It counts the terms it reads, to
// look at the context every prefixCheckEvery.
type postingsReader struct {
	pl    segment.PostingsList
	it    segment.PostingsIterator
	terms int
}

// prefixInto adds to bm the documents of seg, deleted ones included,
// holding a term of field that starts with prefix.
func (pr *postingsReader) prefixInto(ctx context.Context, seg segment.Segment, field string, prefix []byte, bm *roaring.Bitmap) error {
	dict, err := seg.Dictionary(field)
	if err != nil {
		return fmt.Errorf("sparse: prefix %q of %s: %w", prefix, field, err)
	}
	if err := pr.rangeInto(ctx, dict, prefix, prefixEnd(prefix), bm); err != nil {
		return fmt.Errorf("sparse: prefix %q of %s: %w", prefix, field, err)
	}
	return nil
}

// rangeInto adds to bm the documents of dict's segment, deleted ones
// included, holding a term from start (inclusive) to end (exclusive; nil
// for no end).
func (pr *postingsReader) rangeInto(ctx context.Context, dict segment.TermDictionary, start, end []byte, bm *roaring.Bitmap) error {
	terms := dict.AutomatonIterator(nil, start, end)
	for {
		if pr.terms++; pr.terms%prefixCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		e, err := terms.Next()
		if err != nil {
			return err
		}
		if e == nil {
			return nil
		}
		if err := pr.termInto(dict, []byte(e.Term), bm); err != nil {
			return err
		}
	}
}

// termInto adds to bm the documents of dict's segment, deleted ones
// included, holding term.
func (pr *postingsReader) termInto(dict segment.TermDictionary, term []byte, bm *roaring.Bitmap) error {
	var err error
	if pr.pl, err = dict.PostingsList(term, nil, pr.pl); err != nil {
		return fmt.Errorf("term %q: %w", term, err)
	}
	if o, ok := pr.pl.(orInto); ok {
		o.OrInto(bm)
		return nil
	}
	pr.it = pr.pl.Iterator(false, false, false, pr.it)
	for p, err := pr.it.Next(); p != nil || err != nil; p, err = pr.it.Next() {
		if err != nil {
			return fmt.Errorf("term %q: %w", term, err)
		}
		bm.Add(uint32(p.Number()))
	}
	return nil
}

// prefixEnd is the first key after every key starting with prefix, nil
// when there is none (an empty prefix, or one of 0xff bytes only).
func prefixEnd(prefix []byte) []byte {
	end := []byte(string(prefix))
	for i := len(end) - 1; i >= 0; i-- {
		if end[i]++; end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// listSearcher yields a list of documents in document order, unscored
// (score 0): a filter clause's matches. Each has its own list, not a
// pooled one: a filter may hold a thousand at once.
type listSearcher struct {
	docs []uint64
	next int
}

var listSearcherSize = int(reflect.TypeOf(listSearcher{}).Size())

func (s *listSearcher) match(ctx *search.SearchContext) *search.DocumentMatch {
	if s.next >= len(s.docs) {
		return nil
	}
	dm := ctx.DocumentMatchPool.Get()
	dm.IndexInternalID = binary.BigEndian.AppendUint64(dm.IndexInternalID[:0], s.docs[s.next])
	dm.Score = 0
	s.next++
	return dm
}

func (s *listSearcher) Next(ctx *search.SearchContext) (*search.DocumentMatch, error) {
	return s.match(ctx), nil
}

func (s *listSearcher) Advance(ctx *search.SearchContext, id index.IndexInternalID) (*search.DocumentMatch, error) {
	if len(id) != 8 {
		return nil, fmt.Errorf("sparse: filter advance: internal id of %d bytes, want 8", len(id))
	}
	target := binary.BigEndian.Uint64(id)
	s.next += sort.Search(len(s.docs)-s.next, func(i int) bool { return s.docs[s.next+i] >= target })
	return s.match(ctx), nil
}

func (s *listSearcher) Close() error {
	s.docs = nil
	return nil
}

// Weight and SetQueryNorm take part in Bleve's query norm: the clause is
// unscored.
func (s *listSearcher) Weight() float64            { return 1 }
func (s *listSearcher) SetQueryNorm(float64)       {}
func (s *listSearcher) Count() uint64              { return uint64(len(s.docs)) }
func (s *listSearcher) Min() int                   { return 0 }
func (s *listSearcher) DocumentMatchPoolSize() int { return 1 }
func (s *listSearcher) Size() int                  { return listSearcherSize + 8*cap(s.docs) }
