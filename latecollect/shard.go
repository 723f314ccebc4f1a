package latecollect

import (
	"cmp"
	"context"
	"errors"
	"slices"
)

// ErrNoCollect is returned by Collect for a residual-code index: its staged
// search has no collection step that shards could run apart and merge.
var ErrNoCollect = errors.New("latecollect: residual-code index has no token collection")

// TokenHit is one document token a query token collected: its document and
// inner product. Skip marks a token that takes a place among the query
// token's KPrime but cannot make its document a candidate (its document is
// filtered out after collection, or no longer held).
type TokenHit struct {
	Doc   uint64  `json:"doc"`
	Score float32 `json:"score"`
	Skip  bool    `json:"skip,omitempty"`
}

// Collection is what one index's token search found for a query.
type Collection struct {
	// Tokens holds, per query token, its KPrime nearest document tokens,
	// best first (as FAISS returned them; missing results (id -1)
	// dropped).
	Tokens [][]TokenHit `json:"tokens"`
	// Allowed is, when the search has a filter, the number of held
	// documents it allows, counted up to CandidateCap+1 (so a sum over
	// shards exceeds CandidateCap exactly when the union's count does);
	// 0 without a filter.
	Allowed int `json:"allowed"`
}

// ShardDoc names a document of one of several indexes.
type ShardDoc struct {
	Shard int    `json:"shard"`
	Doc   uint64 `json:"doc"`
}

// Collect runs the token search of Candidates mode and returns what it
// collected, without choosing candidates: the first step of a sharded
// search (see the package documentation). opts.Mode is ignored; KPrime,
// NProbe, CandidateCap (for Allowed) and Allow are used as by Search. The
// token search runs whatever Allowed is, since whether the filter is small
// enough to score exhaustively depends on every shard's count. It fails
// with ErrNoCollect for a residual-code index.
func (x *Index) Collect(ctx context.Context, query []float32, opts *SearchOptions) (*Collection, error) {
	so, err := x.prepareSearch(ctx, "collect", query, opts)
	if err != nil {
		return nil, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return nil, ErrClosed
	}
	c, ok := x.mu.fam.(collector)
	if !ok {
		return nil, ErrNoCollect
	}
	return c.collect(ctx, query, so)
}

// MergeCandidates chooses candidates from the collections of several
// indexes (shard i's is cols[i]) exactly as one index holding all their
// documents and tokens would from its own collection: per query token, the
// KPrime best tokens over every collection (by score, ties keeping shard
// order then each list's order), then each document's approximate score
// (the sum over query tokens of its best token among them), then the
// CandidateCap best documents (ties by shard, then docnum). With one
// collection it is the single index's own choice.
//
// A Skip token takes its place among the KPrime but adds to no document.
// Each list is taken in its order (the first token of a document a query
// token meets counts), so a list need not be sorted for the result to be
// the one its index chooses. A nil collection contributes nothing.
func MergeCandidates(cols []*Collection, kPrime, candidateCap int) []ShardDoc {
	if kPrime <= 0 || candidateCap <= 0 {
		return nil
	}
	nq := 0
	for _, c := range cols {
		if c != nil {
			nq = max(nq, len(c.Tokens))
		}
	}
	type acc struct {
		score float32
		last  int // last query token that counted for this document
	}
	approx := map[ShardDoc]*acc{}
	pos := make([]int, len(cols))
	for qi := range nq {
		clear(pos)
		for range kPrime {
			// The best head among the lists; ties go to the first shard.
			best := -1
			var bestScore float32
			for s, c := range cols {
				if c == nil || qi >= len(c.Tokens) || pos[s] >= len(c.Tokens[qi]) {
					continue
				}
				if sc := c.Tokens[qi][pos[s]].Score; best < 0 || sc > bestScore {
					best, bestScore = s, sc
				}
			}
			if best < 0 {
				break
			}
			h := cols[best].Tokens[qi][pos[best]]
			pos[best]++
			if h.Skip {
				continue
			}
			key := ShardDoc{Shard: best, Doc: h.Doc}
			a := approx[key]
			if a == nil {
				a = &acc{last: -1}
				approx[key] = a
			}
			if a.last != qi { // lists come best first: the first is the max
				a.last = qi
				a.score += h.Score
			}
		}
	}
	out := make([]ShardDoc, 0, len(approx))
	for d := range approx {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b ShardDoc) int {
		if c := cmp.Compare(approx[b].score, approx[a].score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Shard, b.Shard); c != 0 {
			return c
		}
		return cmp.Compare(a.Doc, b.Doc)
	})
	if len(out) > candidateCap {
		out = out[:candidateCap]
	}
	return out
}

// Rescore scores the given documents exactly (every token, opts.Scoring)
// and returns the best opts.K, best first, ties by ascending docnum: the
// last step of a sharded search. Documents the index does not hold, or
// that opts.Allow (when set) does not allow, are ignored, and so are
// repeats. Residual-code indexes score as their exact stage does
// (exactScore). The scores are those Search gives the same documents.
func (x *Index) Rescore(ctx context.Context, query []float32, docs []uint64, opts *SearchOptions) ([]Hit, error) {
	so, err := x.prepareSearch(ctx, "rescore", query, opts)
	if err != nil {
		return nil, err
	}
	// Settled, as for Search: a document whose blob changed since it was
	// applied is scored from its codes.
	if err := x.rLockSettled(ctx); err != nil {
		return nil, err
	}
	defer x.mu.RUnlock()
	if len(query) == 0 {
		return nil, nil
	}
	nums := slices.Clone(docs)
	slices.Sort(nums)
	nums = slices.Compact(nums)
	nums = slices.DeleteFunc(nums, func(num uint64) bool {
		return !x.mu.fam.has(num) || (so.Allow != nil && !so.Allow.Contains(num))
	})
	return x.mu.fam.rescore(ctx, query, nums, so)
}
