package encoder

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueryBatch is the most queries a model run of EncodeQuery takes
// by default (Options.QueryBatch). Queries come in all lengths and a run
// pads them to its longest, so the gain of a bigger run fades: SciFact's
// queries with bge-small-en-v1.5 on 2 threads (BenchmarkQueryBatch, 2-core
// AMD EPYC) cost 6.5 ms each alone, 4.6 in runs of 4, 4.3 in runs of 8 and
// 4.6 in runs of 16, padded to 1.35, 1.52 and 1.72 times their tokens.
const DefaultQueryBatch = 8

// queryBatcher runs EncodeQuery's queries, several to a model run when
// they arrive together. It has MaxConcurrentRuns run slots. A query that
// finds a slot free starts a runner at once (after Options.QueryBatchWait,
// if set), so a lone query never waits for company; queries that arrive
// while every slot's run is in flight queue, and the first runner to
// finish takes the whole queue (up to Options.QueryBatch queries and
// BatchTokens padded tokens) into its next run. Under load, then, runs
// grow to the queries that arrived during the previous one, and each
// costs less per query than a run of its own.
//
// A queued query whose context ends leaves the queue. One whose run has
// started returns at once too; the run goes on for the others, and is
// cancelled only when every query in it has gone, or at close. A query
// never changes another's vectors: padding does not change a text's
// vectors (TestQueryBatchSameVectors), and an int8 model, whose
// activation scales span the batch, runs each query alone (QueryBatch is
// at most BatchSize by default, 1 for int8).
//
// A run takes all the threads of a model run (IntraOpThreads) when it
// is alone: nothing else in flight, nothing left queued and no query of
// it marked Busy (a search beside others), which is a lone search's case,
// so its latency is what a run of its own gives. Under load, a run that
// starts beside another, leaves queries queued or holds a Busy query
// runs on one thread on the model's one-thread session, and as many of
// those run at once as the thread budget holds: on 2 cores, two one-thread
// runs use the cores without the spinning and waiting of two-thread runs
// that share them with the searches (with 8 searchers and a writer,
// tandem serve answers 1.26x the searches of two-thread runs; docs/
// server.md). The one-thread session computes the same floats as the
// main one (TestQueryBatchSameVectors).
//
// Runners are goroutines owned by the batcher: close stops them and
// waits for them.
type queryBatcher struct {
	l        *loaded
	maxBatch int
	wait     time.Duration
	// narrow is whether a run under load may take one thread on the
	// model's one-thread session (the budget holds two or more).
	narrow bool
	// ctx is cancelled by close, ending the runs in flight.
	ctx    context.Context
	cancel context.CancelFunc
	// full wakes a runner waiting out QueryBatchWait once a batch is full.
	full    chan struct{}
	runners sync.WaitGroup

	mu struct {
		sync.Mutex
		queue    []*pendingQuery
		idle     int // run slots free
		waiting  int // runners waiting out QueryBatchWait
		inflight int // runs started and not yet answered
		closed   bool
	}
	runs, queries atomic.Int64
}

// pendingQuery is one EncodeQuery call waiting for its run.
type pendingQuery struct {
	owner  *Encoder
	ctx    context.Context
	seq    sequence
	tokens bool
	done   chan struct{} // closed once out or err is set
	vector []float32
	tok    *Tokens
	err    error
}

func newQueryBatcher(l *loaded) *queryBatcher {
	b := &queryBatcher{l: l, maxBatch: l.opts.QueryBatch, wait: l.opts.QueryBatchWait, full: make(chan struct{}, 1)}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.mu.idle = l.opts.MaxConcurrentRuns
	if l.bulkRuns > 1 {
		b.narrow = true
		b.mu.idle = max(b.mu.idle, l.bulkRuns)
	}
	return b
}

// encode queues one prepared query and waits for its run, or for ctx to
// end, or for its owner or the batcher to close (ErrClosed).
func (b *queryBatcher) encode(ctx context.Context, owner *Encoder, seq sequence, tokens bool) ([]float32, *Tokens, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	p := &pendingQuery{owner: owner, ctx: ctx, seq: seq, tokens: tokens, done: make(chan struct{})}
	b.mu.Lock()
	if b.mu.closed || owner.queriesClosed.Load() {
		b.mu.Unlock()
		return nil, nil, ErrClosed
	}
	b.mu.queue = append(b.mu.queue, p)
	// Runners waiting for company take this query too, unless their
	// batches are full already.
	if b.mu.idle > 0 && len(b.mu.queue) > b.mu.waiting*b.maxBatch {
		b.mu.idle--
		waits := b.wait > 0 && b.maxBatch > 1
		if waits {
			b.mu.waiting++
		}
		b.runners.Add(1)
		go b.run(waits)
	}
	if b.mu.waiting > 0 && len(b.mu.queue) >= b.maxBatch {
		select { // wake a runner waiting for company
		case b.full <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return p.vector, p.tok, p.err
	case <-ctx.Done():
		b.mu.Lock()
		b.removeLocked(p)
		b.mu.Unlock()
		return nil, nil, ctx.Err()
	}
}

// removeLocked takes p out of the queue if it is still there.
func (b *queryBatcher) removeLocked(p *pendingQuery) {
	if i := slices.Index(b.mu.queue, p); i >= 0 {
		b.mu.queue = slices.Delete(b.mu.queue, i, i+1)
	}
}

// run is one runner: it runs batches from the queue until the queue is
// empty, then frees its slot. If waits, it first waits QueryBatchWait, or
// until a batch is full.
func (b *queryBatcher) run(waits bool) {
	defer b.runners.Done()
	if waits {
		// Arrivals signal full under the lock, so a signal left from an
		// earlier wait is drained here, and a later one is this wait's.
		b.mu.Lock()
		select {
		case <-b.full:
		default:
		}
		full := len(b.mu.queue) >= b.maxBatch
		b.mu.Unlock()
		if !full {
			t := time.NewTimer(b.wait)
			select {
			case <-t.C:
			case <-b.full:
			case <-b.ctx.Done():
			}
			t.Stop()
		}
	}
	for {
		b.mu.Lock()
		if waits {
			b.mu.waiting--
			waits = false
		}
		batch := b.takeLocked()
		if len(batch) == 0 {
			b.mu.idle++
			b.mu.Unlock()
			return
		}
		narrow := b.narrow && (b.mu.inflight > 0 || len(b.mu.queue) > 0 || slices.ContainsFunc(batch, func(p *pendingQuery) bool { return busy(p.ctx) }))
		b.mu.inflight++
		b.mu.Unlock()
		b.runBatch(batch, narrow)
		b.mu.Lock()
		b.mu.inflight--
		b.mu.Unlock()
	}
}

// takeLocked takes the next batch from the head of the queue: at most
// maxBatch queries whose padded size fits BatchTokens (one query at
// least). Queries whose context has ended are answered and dropped.
func (b *queryBatcher) takeLocked() []*pendingQuery {
	var batch []*pendingQuery
	longest, n := 0, 0
	for _, p := range b.mu.queue {
		if err := p.ctx.Err(); err != nil {
			p.err = err
			close(p.done)
			n++
			continue
		}
		l := max(longest, len(p.seq.ids))
		if len(batch) == b.maxBatch || (len(batch) > 0 && (len(batch)+1)*l > b.l.opts.BatchTokens) {
			break
		}
		batch, longest = append(batch, p), l
		n++
	}
	b.mu.queue = slices.Delete(b.mu.queue, 0, n)
	return batch
}

// runBatch runs one model run for batch and answers each query: on the
// one-thread session if narrow. The run's context ends when every
// query's has, or at close.
func (b *queryBatcher) runBatch(batch []*pendingQuery, narrow bool) {
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var live atomic.Int64
	live.Store(int64(len(batch)))
	seqs := make([]sequence, len(batch))
	idx := make([]int, len(batch))
	tokens := false
	for i, p := range batch {
		stop := context.AfterFunc(p.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
		seqs[i], idx[i] = p.seq, i
		tokens = tokens || p.tokens
	}
	out := &Batch{}
	if b.l.cfg.Pooling != PoolNone {
		out.Vectors = make([][]float32, len(batch))
	}
	if tokens {
		out.Tokens = make([]Tokens, len(batch))
	}
	if testHookQueryRun != nil {
		testHookQueryRun(b.l, len(batch))
	}
	err := b.l.runBatch(ctx, b.l.sides[Query], seqs, idx, out, narrow, false)
	if err == nil {
		b.runs.Add(1)
		b.queries.Add(int64(len(batch)))
	}
	for i, p := range batch {
		switch {
		case err != nil:
			p.err = err
		default:
			if out.Vectors != nil {
				p.vector = out.Vectors[i]
			}
			if p.tokens {
				p.tok = &out.Tokens[i]
			}
		}
		close(p.done)
	}
}

// testHookQueryRun, set by tests, is called as each query run starts,
// with the number of queries in it.
var testHookQueryRun func(l *loaded, n int)

// dropOwner answers owner's queued queries with ErrClosed and refuses its
// next ones: the first step of owner's Close.
func (b *queryBatcher) dropOwner(owner *Encoder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	owner.queriesClosed.Store(true)
	b.mu.queue = slices.DeleteFunc(b.mu.queue, func(p *pendingQuery) bool {
		if p.owner != owner {
			return false
		}
		p.err = ErrClosed
		close(p.done)
		return true
	})
}

// close answers every queued query with ErrClosed, cancels the runs in
// flight and waits for the runners.
func (b *queryBatcher) close() {
	b.mu.Lock()
	b.mu.closed = true
	for _, p := range b.mu.queue {
		p.err = ErrClosed
		close(p.done)
	}
	b.mu.queue = nil
	b.mu.Unlock()
	b.cancel()
	b.runners.Wait()
}
