package encoder

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/internal/testtime"
)

// TestQueryCacheBound checks the query cache's bookkeeping: its bound in
// bytes, least-recently-used eviction, the counts, token output served
// only by an entry that has it, and copies in and out.
func TestQueryCacheBound(t *testing.T) {
	vec := func(x float32) []float32 { return []float32{x, x, x, x} }
	size := int64(queryEntryOverhead + 2 + 4*4) // a 2-byte text and 4 floats
	c := newQueryCache(8 * 3 * size)            // entries up to 3 sizes; 24 fit
	if newQueryCache(0) != nil || newQueryCache(-1) != nil {
		t.Fatal("a cache of no bytes is not nil")
	}
	for i := range 30 {
		c.put(fmt.Sprintf("%02d", i), vec(float32(i)), nil)
		if i == 20 { // touched: outlives 01 to 06, evicted below
			if _, _, ok := c.get("00", false); !ok {
				t.Fatal("00 missing")
			}
		}
	}
	var s QueryStats
	c.stats(&s)
	if s.CacheEntries != 24 || s.CacheBytes != 24*size || s.CacheEvictions != 6 || s.CacheCapacity != 24*size {
		t.Fatalf("after 30 puts in room for 24: %+v", s)
	}
	if _, _, ok := c.get("01", false); ok {
		t.Error("01, the least recently used, survived")
	}
	v, tok, ok := c.get("00", false)
	if !ok || tok != nil || !slices.Equal(v, vec(0)) {
		t.Fatalf("00: %v %v %v", v, tok, ok)
	}
	v[0] = 99 // the caller's copy
	if v, _, _ := c.get("00", false); v[0] != 0 {
		t.Fatal("a caller's change reached the cache")
	}
	// Token output: asked of an entry without it, a miss; stored, a hit
	// for both kinds of request; a later put without tokens keeps them.
	if _, _, ok := c.get("29", true); ok {
		t.Error("an entry without tokens answered a request for them")
	}
	toks := &Tokens{Dim: 1, Vectors: []float32{1, 2}, IDs: []int32{5, 6}, Positions: []int32{0, 1}}
	c.put("29", vec(29), toks)
	c.put("29", vec(29), nil)
	if _, got, ok := c.get("29", true); !ok || !slices.Equal(got.Vectors, toks.Vectors) || !slices.Equal(got.IDs, toks.IDs) {
		t.Fatalf("29 with tokens: %+v %v", got, ok)
	}
	// An entry over an eighth of the bound is not stored.
	c.put("big", make([]float32, 3*size), nil)
	if _, _, ok := c.get("big", false); ok {
		t.Error("an entry of more than an eighth of the cache was stored")
	}
	c.stats(&s)
	if s.CacheBytes > s.CacheCapacity || s.CacheHits != 4 || s.CacheMisses != 3 {
		t.Errorf("stats %+v: want bytes within capacity, 4 hits, 3 misses", s)
	}
}

// holdQueryRuns makes every query run of l wait, once started, until the
// test sends on the returned release channel; started receives each run's
// size.
func holdQueryRuns(t *testing.T, l *loaded) (started chan int, release chan struct{}) {
	started, release = make(chan int, 16), make(chan struct{})
	testHookQueryRun = func(x *loaded, n int) {
		if x != l {
			return
		}
		started <- n
		<-release
	}
	t.Cleanup(func() { testHookQueryRun = nil })
	return started, release
}

// waitQueued waits until n queries are queued on e's model (for up to
// 10 s, scaled by the test time scale).
func waitQueued(t *testing.T, e *Encoder, n int) {
	t.Helper()
	deadline := time.Now().Add(testtime.D(10 * time.Second))
	for {
		e.queries.mu.Lock()
		got := len(e.queries.mu.queue)
		e.queries.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d queries queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type queryResult struct {
	b   *Batch
	err error
}

func encodeQueryAsync(e *Encoder, ctx context.Context, text string) chan queryResult {
	ch := make(chan queryResult, 1)
	go func() {
		b, err := e.EncodeQuery(ctx, text, true)
		ch <- queryResult{b, err}
	}()
	return ch
}

// wantQuery checks a query's result against the text's own encoding.
func wantQuery(t *testing.T, e *Encoder, text string, r queryResult) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%q: %v", text, r.err)
	}
	want, err := e.Encode(context.Background(), Request{Side: Query, Texts: []string{text}, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	if (want.Vectors != nil && !slices.Equal(r.b.Vectors[0], want.Vectors[0])) || !slices.Equal(r.b.Tokens[0].Vectors, want.Tokens[0].Vectors) ||
		!slices.Equal(r.b.Tokens[0].IDs, want.Tokens[0].IDs) {
		t.Fatalf("%q: EncodeQuery differs from Encode", text)
	}
}

// TestQueryBatching checks how EncodeQuery batches: queries that arrive
// during a run share the next one; a queued query whose context ends
// leaves the queue; one cancelled during its run returns at once, and the
// run still answers the others; the cache answers a repeated text.
func TestQueryBatching(t *testing.T) {
	e := load(t, "testdata/tiny-bert", &Options{MaxConcurrentRuns: 1, IntraOpThreads: 1})
	started, release := holdQueryRuns(t, e.loaded)
	ctx := context.Background()

	a := encodeQueryAsync(e, ctx, "the cat sat")
	if n := <-started; n != 1 {
		t.Fatalf("a lone query ran in a batch of %d", n)
	}
	ctxB, cancelB := context.WithCancel(ctx)
	b := encodeQueryAsync(e, ctxB, "hello")
	waitQueued(t, e, 1)
	ctxC, cancelC := context.WithCancel(ctx)
	defer cancelC()
	c := encodeQueryAsync(e, ctxC, "hello world, the cats sat")
	waitQueued(t, e, 2)
	d := encodeQueryAsync(e, ctx, "a mat")
	waitQueued(t, e, 3)
	cancelB()
	if r := <-b; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled while queued: %v", r.err)
	}
	waitQueued(t, e, 2)
	release <- struct{}{}
	ra := <-a
	if n := <-started; n != 2 {
		t.Fatalf("the queries queued during a run ran in a batch of %d, want 2", n)
	}
	cancelC() // during its run
	if r := <-c; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled during its run: %v", r.err)
	}
	release <- struct{}{}
	rd := <-d
	testHookQueryRun = nil
	wantQuery(t, e, "the cat sat", ra)
	wantQuery(t, e, "a mat", rd) // its run-mate's cancellation did not end the run
	if s := e.QueryStats(); s.Runs != 2 || s.Queries != 3 || s.CacheMisses != 4 || s.CacheHits != 0 || s.CacheEntries != 2 {
		t.Errorf("stats %+v: want 2 runs of 3 queries, 4 misses, the 2 answered texts cached", s)
	}

	// From the cache: the same vectors, no run, and the caller's own copy.
	got, err := e.EncodeQuery(ctx, "a mat", true)
	if err != nil {
		t.Fatal(err)
	}
	wantQuery(t, e, "a mat", queryResult{got, nil})
	got.Vectors[0][0]++
	again, err := e.EncodeQuery(ctx, "a mat", false)
	if err != nil {
		t.Fatal(err)
	}
	if again.Tokens != nil || again.Vectors[0][0] == got.Vectors[0][0] || again.InputTokens != 0 {
		t.Errorf("a cached query without tokens: tokens %v, InputTokens %d, or the caller's change reached the cache", again.Tokens, again.InputTokens)
	}
	if s := e.QueryStats(); s.Runs != 2 || s.CacheHits != 2 {
		t.Errorf("stats %+v: want the 2 repeats answered by the cache", s)
	}
	if _, err := e.EncodeQuery(ctx, "bad \xff", false); !errors.Is(err, ErrBadText) {
		t.Errorf("invalid UTF-8: %v, want ErrBadText", err)
	}
}

// TestQueryBatchClose checks Close with queries queued: an Encoder's Close
// answers its queued queries with ErrClosed and waits for its query in a
// run; another Encoder of the same model keeps its queued query.
func TestQueryBatchClose(t *testing.T) {
	skipWithoutORT(t)
	var cache Cache
	opts := &Options{MaxConcurrentRuns: 1, IntraOpThreads: 1}
	e1 := cacheLoad(t, &cache, "testdata/tiny-colbert", opts)
	e2 := cacheLoad(t, &cache, "testdata/tiny-colbert", opts)
	defer e2.Close()
	started, release := holdQueryRuns(t, e1.loaded)
	ctx := context.Background()

	a := encodeQueryAsync(e1, ctx, "the cat sat")
	<-started
	b := encodeQueryAsync(e1, ctx, "hello world")
	c := encodeQueryAsync(e2, ctx, "search query")
	waitQueued(t, e1, 2)
	closed := make(chan error, 1)
	go func() { closed <- e1.Close() }()
	if r := <-b; !errors.Is(r.err, ErrClosed) {
		t.Fatalf("a query queued at Close: %v, want ErrClosed", r.err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with its query still in a run", err)
	default:
	}
	release <- struct{}{}
	if r := <-a; r.err != nil {
		t.Fatalf("the query in a run at Close: %v", r.err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := e1.EncodeQuery(ctx, "the cat sat", false); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	<-started // the other Encoder's query runs
	release <- struct{}{}
	r := <-c
	testHookQueryRun = nil
	wantQuery(t, e2, "search query", r)
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.EncodeQuery(ctx, "search query", false); !errors.Is(err, ErrClosed) {
		t.Errorf("after the last Close: %v, want ErrClosed", err)
	}
}

// TestQueryBatchWait checks Options.QueryBatchWait: a query that finds the
// model idle waits for company, up to the wait, but no longer than it
// takes to fill a batch. And an int8 model never batches queries.
func TestQueryBatchWait(t *testing.T) {
	// A wait no test outlasts: the two queries are answered once the
	// batch is full, or not before the test's deadline.
	e := load(t, "testdata/tiny-bert", &Options{MaxConcurrentRuns: 1, IntraOpThreads: 1, QueryBatch: 2, QueryBatchWait: time.Hour})
	var sizes []int
	testHookQueryRun = func(x *loaded, n int) {
		if x == e.loaded {
			sizes = append(sizes, n) // one runner: runs do not overlap
		}
	}
	t.Cleanup(func() { testHookQueryRun = nil })
	start := time.Now()
	a := encodeQueryAsync(e, context.Background(), "the cat sat")
	waitQueued(t, e, 1)
	b := encodeQueryAsync(e, context.Background(), "a mat")
	ctx := testtime.Context(t)
	answer := func(c chan queryResult) queryResult {
		t.Helper()
		select {
		case r := <-c:
			return r
		case <-ctx.Done():
			t.Fatalf("2 queries with QueryBatch 2 and QueryBatchWait %v: unanswered after %s, want one run of 2 once the batch is full", time.Hour, time.Since(start))
			return queryResult{}
		}
	}
	wantQuery(t, e, "the cat sat", answer(a))
	wantQuery(t, e, "a mat", answer(b))
	// The full batch ran at once, not after the wait.
	if !slices.Equal(sizes, []int{2}) {
		t.Errorf("2 queries with QueryBatch 2: runs %v after %s, want one run of 2 at once", sizes, time.Since(start))
	}

	cfg := tinyConfig(t, "tiny-bert")
	cfg.Precision = Int8
	i8 := load(t, "testdata/tiny-bert", &Options{MaxConcurrentRuns: 1, IntraOpThreads: 1, Config: cfg, QueryCacheBytes: -1})
	started, release := holdQueryRuns(t, i8.loaded)
	var rs []chan queryResult
	texts := []string{"the cat sat", "a mat", "hello", "the dog."}
	for i, text := range texts {
		rs = append(rs, encodeQueryAsync(i8, context.Background(), text))
		if i == 0 {
			<-started
		}
	}
	waitQueued(t, i8, len(texts)-1)
	for range texts[1:] {
		release <- struct{}{}
		if n := <-started; n != 1 {
			t.Fatalf("an int8 model ran %d queries together", n)
		}
	}
	release <- struct{}{}
	for i, r := range rs {
		if x := <-r; x.err != nil {
			t.Fatalf("%q: %v", texts[i], x.err)
		}
	}
	if s := i8.QueryStats(); s.Runs != 4 || s.CacheHits+s.CacheMisses != 0 || s.CacheCapacity != 0 {
		t.Errorf("int8, cache disabled: %+v", s)
	}
}

// TestQueryBatchRace hammers EncodeQuery from many goroutines, with
// cancellations, for go test -race: every answer is the text's own
// encoding or the caller's context error.
func TestQueryBatchRace(t *testing.T) {
	e := load(t, "testdata/tiny-colbert", &Options{MaxConcurrentRuns: 2, IntraOpThreads: 1, QueryCacheBytes: 4 << 10})
	texts := []string{"the cat sat", "hello world", "the dog.", "search query", "a mat", "cats", strings.Repeat("long ", 20)}
	want := map[string]*Batch{}
	for _, text := range texts {
		b, err := e.Encode(context.Background(), Request{Side: Query, Texts: []string{text}})
		if err != nil {
			t.Fatal(err)
		}
		want[text] = b
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				text := texts[(g+i)%len(texts)]
				ctx, cancel := context.WithCancel(context.Background())
				if i%5 == 4 {
					cancel()
				}
				b, err := e.EncodeQuery(ctx, text, false)
				cancel()
				switch {
				case errors.Is(err, context.Canceled) && i%5 == 4:
				case err != nil:
					errs <- fmt.Errorf("%q: %w", text, err)
					return
				case !slices.Equal(b.Tokens[0].Vectors, want[text].Tokens[0].Vectors):
					errs <- fmt.Errorf("%q: vectors differ from its own run", text)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if s := e.QueryStats(); s.CacheBytes > s.CacheCapacity || s.Queries == 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestQueryBusyRunsOnOneThread: a lone query runs on the model's main
// session, with all of a run's threads; one marked Busy (a search beside
// others) runs on the one-thread session, which gives the same vectors.
func TestQueryBusyRunsOnOneThread(t *testing.T) {
	e := load(t, "testdata/tiny-bert", &Options{MaxConcurrentRuns: 1, IntraOpThreads: 2, QueryCacheBytes: -1})
	m := e.loaded.sides[Query].model
	bulkOpen := func() bool { m.bulk.Lock(); defer m.bulk.Unlock(); return m.bulk.s != nil }
	ctx := context.Background()
	alone, err := e.EncodeQuery(ctx, "the cat sat on the mat", true)
	if err != nil {
		t.Fatal(err)
	}
	if bulkOpen() {
		t.Fatal("a lone query ran on the one-thread session")
	}
	busyOut, err := e.EncodeQuery(Busy(ctx), "the cat sat on the mat", true)
	if err != nil {
		t.Fatal(err)
	}
	if !bulkOpen() {
		t.Fatal("a Busy query did not run on the one-thread session")
	}
	if !slices.Equal(alone.Vectors[0], busyOut.Vectors[0]) || !slices.Equal(alone.Tokens[0].Vectors, busyOut.Tokens[0].Vectors) {
		t.Error("the one-thread session's vectors differ from the main session's")
	}
}
