package latecollect

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// Mode chooses how candidates are found.
type Mode int

const (
	// Candidates finds candidate documents through the token index and
	// scores them: with FAISS token keys, k' tokens per query token
	// choose at most CandidateCap documents, all rescored exactly; with
	// residual codes, the staged search scores exactly only the best
	// ExactCap (see the package documentation).
	Candidates Mode = iota
	// Exhaustive scores every document exactly, as the exact stage of
	// Candidates mode scores its candidates: the reference that candidate
	// generation is measured against.
	Exhaustive
	// Reference scores every document exactly in float32 arithmetic,
	// over the stored tokens as decoded and the query as given: the
	// full-precision reference that the exact stage itself is measured
	// against. It equals Exhaustive for float16 and float32 blobs; for I8
	// blobs the exact stage computes in int8, the query quantised
	// (queryI8), and Reference does not.
	Reference
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Candidates:
		return "candidates"
	case Exhaustive:
		return "exhaustive"
	case Reference:
		return "reference"
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
	// Mode is Candidates (default), Exhaustive or Reference.
	Mode Mode
	// Scoring overrides Options.Scoring.
	Scoring Scoring
	// KPrime, CandidateCap, NProbe and ExactCap override the Options of
	// the same name.
	KPrime, CandidateCap, NProbe, ExactCap int

	// trace, when set (tests), records the candidates of each stage of
	// a residual-code search.
	trace *stageTrace
	// listEst, when not 0 (tests), has the list stage raise a lane
	// missing from a document's probed lists to the score of the query
	// token's centroid of this rank, not to the centroid interaction.
	listEst int
	// candProbe and candCap, when not 0 (tests), replace stage 2's
	// probe and the candidate cap depthCaps sets; probeBudget replaces
	// DepthProbeEntries·K (negative: no budget).
	candProbe, candCap, probeBudget int
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
// With FAISS token keys the filter is applied in FAISS: allowed documents
// become token-id ranges (an IDSelector inside the search), so every token
// a query token collects belongs to an allowed document; when no more
// documents are allowed than the candidate cap, they are all scored
// exactly without FAISS. With residual codes the filter is applied to the
// documents the centroids list; when no more documents are allowed than
// the candidate cap, they all go through the stages after the probe.
func (x *Index) Search(ctx context.Context, query []float32, opts *SearchOptions) ([]Hit, error) {
	so, err := x.prepareSearch(ctx, "search", query, opts)
	if err != nil || len(query) == 0 {
		return nil, err
	}
	if err := x.rLockSettled(ctx); err != nil {
		return nil, err
	}
	defer x.mu.RUnlock()
	return x.mu.fam.search(ctx, query, so)
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
	if so.ExactCap == 0 {
		so.ExactCap = x.opts.ExactCap // 0 still: automatic (exactCapLocked)
	}
	switch {
	case so.K < 0 || so.KPrime < 0 || so.CandidateCap < 0 || so.NProbe < 0:
		return fmt.Errorf("latecollect: search: %w: negative K %d, KPrime %d, CandidateCap %d or NProbe %d", ErrBadOptions, so.K, so.KPrime, so.CandidateCap, so.NProbe)
	case !so.Scoring.valid():
		return fmt.Errorf("latecollect: search: %w: Scoring %q", ErrBadOptions, so.Scoring)
	case so.Mode != Candidates && so.Mode != Exhaustive && so.Mode != Reference:
		return fmt.Errorf("latecollect: search: %w: %v", ErrBadOptions, so.Mode)
	}
	return nil
}

// allowedAtMost reports whether allow holds at most n documents of f.
func allowedAtMost(f family, allow *roaring64.Bitmap, n int) bool {
	return allow.GetCardinality() <= uint64(n) || countAllowed(f, allow, n) <= n
}

// countAllowed counts the documents of f in allow, stopping at n+1.
func countAllowed(f family, allow *roaring64.Bitmap, n int) int {
	c := 0
	for it := allow.Iterator(); it.HasNext() && c <= n; {
		if f.has(it.Next()) {
			c++
		}
	}
	return c
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
