package latecollect

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// search scores exactly every allowed document in Exhaustive and
// Reference modes, or when
// the filter allows no more documents than CandidateCap; otherwise the
// candidates collectLocked chooses.
func (f *faissFamily) search(ctx context.Context, query []float32, so SearchOptions) ([]Hit, error) {
	var (
		cands []uint64
		err   error
	)
	if so.Mode == Exhaustive || so.Mode == Reference || (so.Allow != nil && allowedAtMost(f, so.Allow, so.CandidateCap)) {
		cands, err = f.allowedDocsLocked(ctx, so.Allow)
	} else {
		cands, err = f.collectLocked(ctx, query, so)
	}
	if err != nil {
		return nil, err
	}
	return f.rescore(ctx, query, cands, so)
}

// collect is the token search of Candidates mode, with the count of held
// documents the filter allows (see Collect).
func (f *faissFamily) collect(ctx context.Context, query []float32, so SearchOptions) (*Collection, error) {
	col := &Collection{}
	if so.Allow != nil {
		col.Allowed = countAllowed(f, so.Allow, so.CandidateCap)
	}
	var err error
	if col.Tokens, err = f.tokenSearchLocked(ctx, query, so); err != nil {
		return nil, err
	}
	return col, nil
}

// allowedDocsLocked lists the documents of the index in allow (all of them
// when allow is nil), in docnum order. It looks at ctx every 4096 allowed
// documents.
func (f *faissFamily) allowedDocsLocked(ctx context.Context, allow *roaring64.Bitmap) ([]uint64, error) {
	if allow == nil {
		return sortedDocs(f.docs), ctx.Err()
	}
	var out []uint64
	for i, it := 0, allow.Iterator(); it.HasNext(); i++ {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if num := it.Next(); f.has(num) {
			out = append(out, num)
		}
	}
	return out, nil
}

// collectLocked runs every query token through FAISS in one batched call
// and returns the candidate documents, at most CandidateCap of them: those
// whose approximate score (the sum over query tokens of the best collected
// token of the document) is highest. It is MergeCandidates over this
// index's own Collection, so that shards choose as one index would.
func (f *faissFamily) collectLocked(ctx context.Context, query []float32, so SearchOptions) ([]uint64, error) {
	if so.KPrime == 0 || so.CandidateCap == 0 {
		return nil, nil
	}
	tokens, err := f.tokenSearchLocked(ctx, query, so)
	if err != nil {
		return nil, err
	}
	picked := MergeCandidates([]*Collection{{Tokens: tokens}}, so.KPrime, so.CandidateCap)
	cands := make([]uint64, len(picked))
	for i, p := range picked {
		cands[i] = p.Doc
	}
	return cands, nil
}

// tokenSearchLocked runs every query token through FAISS in one batched
// call for its KPrime nearest token keys, best first. The filter is given
// to FAISS as token-id ranges when it can be; otherwise (and for a token
// whose document the index no longer holds) the token is kept, as it takes
// one of the KPrime places, but marked Skip. With KPrime 0 every list is
// empty.
func (f *faissFamily) tokenSearchLocked(ctx context.Context, query []float32, so SearchOptions) ([][]TokenHit, error) {
	nq := len(query) / f.opts.Dim
	out := make([][]TokenHit, nq)
	if so.KPrime == 0 || nq == 0 {
		return out, nil
	}
	fo := faiss.SearchOptions{NProbe: so.NProbe}
	postFilter := false
	if so.Allow != nil {
		if f.filterAtCollection || (!so.Allow.IsEmpty() && so.Allow.Maximum() >= maxFilterDoc) {
			postFilter = true
		} else {
			// FAISS gets a bitmap of documents and tests each token id
			// shifted right past its position.
			fo.Allow, fo.AllowShift = so.Allow, PositionBits
		}
	}
	res, err := f.fx.Search(ctx, query, so.KPrime, fo)
	if err != nil {
		return nil, fmt.Errorf("latecollect: search: token index: %w", err)
	}
	for qi, r := range res {
		if qi >= nq {
			break
		}
		hits := make([]TokenHit, 0, len(r.IDs))
		for j, id := range r.IDs {
			if id < 0 {
				continue // a missing result
			}
			num := uint64(id) >> PositionBits
			skip := (postFilter && !so.Allow.Contains(num)) || !f.has(num)
			hits = append(hits, TokenHit{Doc: num, Score: r.Scores[j], Skip: skip})
		}
		out[qi] = hits
	}
	return out, nil
}

// rescore scores every token of every candidate exactly, from the
// matrices in memory, spreading the candidates over at most Parallelism
// goroutines, which it joins.
func (f *faissFamily) rescore(ctx context.Context, query []float32, cands []uint64, so SearchOptions) ([]Hit, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	dim := f.opts.Dim
	nq := len(query) / dim
	k := newExactKernels(query, dim, newQueryLanes(query, dim), so.Mode) // shared by the workers
	hits := make([]Hit, len(cands))
	workers := max(1, min(f.opts.Parallelism, len(cands)/16+1))
	var (
		wg   sync.WaitGroup
		next = make(chan int, workers)
	)
	const chunk = 32
	go func() {
		defer close(next)
		for i := 0; i < len(cands); i += chunk {
			if ctx.Err() != nil {
				return
			}
			next <- i
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			best := make([]float32, nq)
			var s blobScratch
			for start := range next {
				for i := start; i < min(start+chunk, len(cands)); i++ {
					e := f.docs[cands[i]]
					scoreBlob(k, e.blob, e.h, best, &s)
					hits[i] = Hit{DocNum: cands[i], Score: combine(so.Scoring, best)}
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return topHits(hits, so.K), nil
}

func sortedDocs(m map[uint64]docEntry) []uint64 {
	out := slices.Collect(maps.Keys(m))
	slices.Sort(out)
	return out
}
