package encoder

import (
	"context"
	"fmt"
)

// EncodeQuery encodes one query text, as a search does, returning a Batch
// of one. The encoding comes from the model's query cache when the text
// was encoded lately (Options.QueryCacheBytes), else from a model run
// shared with the queries of other callers that arrive while runs are in
// flight (Options.QueryBatch, QueryBatchWait). Either way the vectors are
// bit-identical to those Encode gives the text alone
// (TestQueryBatchSameVectors). Token output is returned if tokens is set,
// or when pooling is none. InputTokens is 0 when the cache answered.
//
// Cancelling ctx returns at once, whether the query is queued or its run
// has started; the run goes on for the other queries in it. Close answers
// the Encoder's queued queries with ErrClosed.
func (e *Encoder) EncodeQuery(ctx context.Context, text string, tokens bool) (*Batch, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return nil, ErrClosed
	}
	tokens = tokens || e.cfg.Pooling == PoolNone
	if tokens && e.cfg.Pooling == PoolModel {
		return nil, fmt.Errorf("%w: %s pools inside the model", ErrNoTokens, e.cfg.Name)
	}
	if vec, tok, ok := e.qcache.get(text, tokens); ok {
		return oneQuery(vec, tok, 0), nil
	}
	p, err := e.prepare(Query, []string{text}, tokens)
	if err != nil {
		return nil, err
	}
	seq := p.seqs[0]
	vec, tok, err := e.queries.encode(ctx, e, seq, tokens)
	if err != nil {
		return nil, err
	}
	e.qcache.put(text, vec, tok)
	return oneQuery(vec, tok, len(seq.ids)), nil
}

// busyKey marks a context whose query runs beside other searches (Busy).
type busyKey struct{}

// Busy returns ctx marked as a search that runs beside others in the same
// process: EncodeQuery then runs its query on one thread even when no
// other query run is in flight, leaving the other cores to the other
// searches, as it does for every run under load. A lone search, unmarked,
// runs on all of a run's threads.
func Busy(ctx context.Context) context.Context { return context.WithValue(ctx, busyKey{}, true) }

func busy(ctx context.Context) bool { b, _ := ctx.Value(busyKey{}).(bool); return b }

func oneQuery(vec []float32, tok *Tokens, inputTokens int) *Batch {
	b := &Batch{InputTokens: inputTokens}
	if vec != nil {
		b.Vectors = [][]float32{vec}
	}
	if tok != nil {
		b.Tokens = []Tokens{*tok}
	}
	return b
}

// QueryStats counts EncodeQuery's work on a loaded model. The model's
// cache and runs are shared by every Encoder of it (see Cache), so the
// counts are the model's, not one Encoder's.
type QueryStats struct {
	// CacheHits and CacheMisses count the lookups of the query cache,
	// CacheEvictions the entries it dropped to stay within
	// CacheCapacity bytes; CacheEntries and CacheBytes are what it
	// holds now. All are 0 when the cache is disabled.
	CacheHits, CacheMisses, CacheEvictions int64
	CacheEntries                           int
	CacheBytes, CacheCapacity              int64
	// Runs is the number of model runs EncodeQuery made and Queries the
	// queries they encoded: Queries/Runs is the mean batch.
	Runs, Queries int64
}

// QueryStats reports EncodeQuery's counts for the loaded model.
func (e *Encoder) QueryStats() QueryStats {
	s := QueryStats{Runs: e.queries.runs.Load(), Queries: e.queries.queries.Load()}
	e.qcache.stats(&s)
	return s
}
