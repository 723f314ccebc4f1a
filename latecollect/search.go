package latecollect

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// Mode chooses how candidates are found.
type Mode int

const (
	// Candidates collects candidate documents through the token index
	// (k' tokens per query token, at most CandidateCap documents) and
	// rescores them exactly.
	Candidates Mode = iota
	// Exhaustive scores every document exactly: the reference that
	// candidate generation is measured against.
	Exhaustive
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Candidates:
		return "candidates"
	case Exhaustive:
		return "exhaustive"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// SearchOptions tune one search. Zero fields mean the Index's Options.
type SearchOptions struct {
	// K is the number of hits; default 10.
	K int
	// Allow, when not nil, restricts hits to these docnums (for example
	// from engine.FilterBitmap).
	Allow *roaring64.Bitmap
	// Mode is Candidates (default) or Exhaustive.
	Mode Mode
	// Scoring overrides Options.Scoring.
	Scoring Scoring
	// KPrime, CandidateCap, NProbe, ResidualCap and ExactCap override
	// the Options of the same name.
	KPrime, CandidateCap, NProbe, ResidualCap, ExactCap int
	// TokenPrune overrides Options.TokenPrune.
	TokenPrune float32
}

// Hit is one scored document.
type Hit struct {
	DocNum uint64
	Score  float32
}

// Search ranks documents for a query given as token vectors of Dim values
// row after row (encoder.Tokens.Vectors of EncodeQueries). Hits come best
// first, ties by ascending docnum. A query with no tokens has no hits.
//
// The filter is applied in FAISS: allowed documents become token-id ranges
// (an IDSelector inside the search), so every token a query token collects
// belongs to an allowed document. When no more documents are allowed than
// the candidate cap, they are all scored exactly without FAISS.
func (x *Index) Search(ctx context.Context, query []float32, opts *SearchOptions) ([]Hit, error) {
	so, err := x.prepareSearch(ctx, "search", query, opts)
	if err != nil || len(query) == 0 {
		return nil, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return nil, ErrClosed
	}
	if x.residual {
		if so.Mode == Exhaustive {
			return x.exhaustiveFromStoreLocked(ctx, query, so)
		}
		return x.searchResidualLocked(ctx, query, so)
	}
	var cands []uint64
	if so.Mode == Exhaustive || (so.Allow != nil && x.allowedAtMostLocked(so.Allow, so.CandidateCap)) {
		cands, err = x.allowedDocsLocked(ctx, so.Allow)
	} else {
		cands, err = x.collectLocked(ctx, query, so)
	}
	if err != nil {
		return nil, err
	}
	return x.rescoreLocked(ctx, query, cands, so)
}

// prepareSearch fills the search options and checks the query as every
// search method (op names it in errors) does before taking the lock.
func (x *Index) prepareSearch(ctx context.Context, op string, query []float32, opts *SearchOptions) (SearchOptions, error) {
	var so SearchOptions
	if opts != nil {
		so = *opts
	}
	if err := x.fillSearch(&so); err != nil {
		return so, err
	}
	dim := x.opts.Dim
	if len(query)%dim != 0 {
		return so, fmt.Errorf("latecollect: %s: %w: %d values is not a whole number of %d-dimensional tokens", op, ErrBadVector, len(query), dim)
	}
	if err := checkFinite(query, dim); err != nil {
		return so, fmt.Errorf("latecollect: %s: query %w", op, err)
	}
	return so, ctx.Err()
}

func (x *Index) fillSearch(so *SearchOptions) error {
	if so.K == 0 {
		so.K = 10
	}
	if so.KPrime == 0 {
		so.KPrime = x.opts.KPrime
	}
	if so.CandidateCap == 0 {
		so.CandidateCap = x.opts.CandidateCap
	}
	if so.NProbe == 0 {
		so.NProbe = x.opts.NProbe
	}
	if so.Scoring == "" {
		so.Scoring = x.opts.Scoring
	}
	if so.ResidualCap == 0 {
		so.ResidualCap = x.opts.ResidualCap
	}
	if so.ExactCap == 0 {
		so.ExactCap = x.opts.ExactCap // 0 still: automatic (exactCapLocked)
	}
	if so.TokenPrune == 0 {
		so.TokenPrune = x.opts.TokenPrune
	}
	switch {
	case so.K < 0 || so.KPrime < 0 || so.CandidateCap < 0 || so.NProbe < 0 || so.ResidualCap < 0:
		return fmt.Errorf("latecollect: search: %w: negative K %d, KPrime %d, CandidateCap %d, NProbe %d or ResidualCap %d", ErrBadOptions, so.K, so.KPrime, so.CandidateCap, so.NProbe, so.ResidualCap)
	case math.IsNaN(float64(so.TokenPrune)) || math.IsInf(float64(so.TokenPrune), 0):
		return fmt.Errorf("latecollect: search: %w: TokenPrune %v is not a finite number", ErrBadOptions, so.TokenPrune)
	case !so.Scoring.valid():
		return fmt.Errorf("latecollect: search: %w: Scoring %q", ErrBadOptions, so.Scoring)
	case so.Mode != Candidates && so.Mode != Exhaustive:
		return fmt.Errorf("latecollect: search: %w: %v", ErrBadOptions, so.Mode)
	}
	return nil
}

// allowedAtMostLocked reports whether allow holds at most n documents of
// the index.
func (x *Index) allowedAtMostLocked(allow *roaring64.Bitmap, n int) bool {
	return allow.GetCardinality() <= uint64(n) || x.countAllowedLocked(allow, n) <= n
}

// countAllowedLocked counts the documents of the index in allow, stopping
// at n+1.
func (x *Index) countAllowedLocked(allow *roaring64.Bitmap, n int) int {
	c := 0
	for it := allow.Iterator(); it.HasNext() && c <= n; {
		if x.hasDocLocked(it.Next()) {
			c++
		}
	}
	return c
}

// allowedDocsLocked lists the documents of the index in allow (all of them
// when allow is nil), in docnum order. It looks at ctx every 4096 allowed
// documents.
func (x *Index) allowedDocsLocked(ctx context.Context, allow *roaring64.Bitmap) ([]uint64, error) {
	if allow == nil {
		return sortedDocs(x.mu.docs), ctx.Err()
	}
	var out []uint64
	for i, it := 0, allow.Iterator(); it.HasNext(); i++ {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if num := it.Next(); x.hasDocLocked(num) {
			out = append(out, num)
		}
	}
	return out, nil
}

func (x *Index) hasDocLocked(num uint64) bool {
	if x.residual {
		if x.mu.rc == nil {
			return false
		}
		_, ok := x.mu.rc.docs[num]
		return ok
	}
	_, ok := x.mu.docs[num]
	return ok
}

// collectLocked runs every query token through FAISS in one batched call
// and returns the candidate documents, at most CandidateCap of them: those
// whose approximate score (the sum over query tokens of the best collected
// token of the document) is highest. It is MergeCandidates over this
// index's own Collection, so that shards choose as one index would.
func (x *Index) collectLocked(ctx context.Context, query []float32, so SearchOptions) ([]uint64, error) {
	if so.KPrime == 0 || so.CandidateCap == 0 {
		return nil, nil
	}
	tokens, err := x.tokenSearchLocked(ctx, query, so)
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
func (x *Index) tokenSearchLocked(ctx context.Context, query []float32, so SearchOptions) ([][]TokenHit, error) {
	nq := len(query) / x.opts.Dim
	out := make([][]TokenHit, nq)
	if so.KPrime == 0 || nq == 0 {
		return out, nil
	}
	fo := faiss.SearchOptions{NProbe: so.NProbe}
	postFilter := false
	if so.Allow != nil {
		if x.filterAtCollection || (!so.Allow.IsEmpty() && so.Allow.Maximum() >= maxFilterDoc) {
			postFilter = true
		} else {
			// FAISS gets a bitmap of documents and tests each token id
			// shifted right past its position.
			fo.Allow, fo.AllowShift = so.Allow, PositionBits
		}
	}
	res, err := x.mu.fx.Search(ctx, query, so.KPrime, fo)
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
			skip := (postFilter && !so.Allow.Contains(num)) || !x.hasDocLocked(num)
			hits = append(hits, TokenHit{Doc: num, Score: r.Scores[j], Skip: skip})
		}
		out[qi] = hits
	}
	return out, nil
}

// rescoreLocked scores every token of every candidate exactly, spreading
// the candidates over at most Parallelism goroutines, which it joins.
func (x *Index) rescoreLocked(ctx context.Context, query []float32, cands []uint64, so SearchOptions) ([]Hit, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	dim := x.opts.Dim
	nq := len(query) / dim
	hits := make([]Hit, len(cands))
	workers := max(1, min(x.opts.Parallelism, len(cands)/16+1))
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
			var buf []float32
			for start := range next {
				for i := start; i < min(start+chunk, len(cands)); i++ {
					e := x.mu.docs[cands[i]]
					buf = maxSimBlob(query, e.blob, e.h, best, buf)
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

// topHits sorts hits best first (ties by ascending docnum) and keeps k.
func topHits(hits []Hit, k int) []Hit {
	slices.SortFunc(hits, func(a, b Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.DocNum, b.DocNum)
	})
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits
}

func sortedDocs(m map[uint64]docEntry) []uint64 {
	out := slices.Collect(maps.Keys(m))
	slices.Sort(out)
	return out
}
