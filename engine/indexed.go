package engine

import (
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/filter"
)

// IndexedDocs returns the document numbers each derived index holds, keyed
// by retriever name: "bm25" (Bleve), "dense:<model>" (FAISS) and
// "late:<model>" (the token index). Once an index has applied the whole
// change log, as after Open or a write that returned, it holds exactly the
// live documents of storage (with a blob of its model, for dense and late):
// consistency checks such as tandem torture compare the sets with storage
// and with each other. Search never shows a difference, since hits are
// materialised from storage.
func (s *Shard) IndexedDocs(ctx context.Context) (map[string]*roaring64.Bitmap, error) {
	e := s.e
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	out := map[string]*roaring64.Bitmap{}
	all, err := e.sparse.FilterBitmap(ctx, e.st.Schema(), &filter.And{}) // matches every document
	if err != nil {
		return nil, fmt.Errorf("engine: documents in bm25: %w", err)
	}
	out["bm25"] = all
	for _, m := range e.models {
		if m.dense != nil {
			out[m.dense.Name()] = m.dense.DocNums()
		}
		if m.late != nil {
			out[m.late.Name()] = m.late.DocNums()
		}
	}
	return out, nil
}
