package encoder

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
)

// cacheLoad loads dir from c, failing the test on error.
func cacheLoad(t *testing.T, c *Cache, dir string, opts *Options) *Encoder {
	t.Helper()
	e, err := c.Load(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func wantStats(t *testing.T, c *Cache, want CacheStats) {
	t.Helper()
	if got := c.Stats(); got != want {
		t.Fatalf("cache stats %+v, want %+v", got, want)
	}
}

// encodeOK encodes a query with e and checks its vector against want.
func encodeOK(t *testing.T, e *Encoder, want []float32) {
	t.Helper()
	b, err := e.EncodeQueries(context.Background(), []string{"hello world"})
	if err != nil {
		t.Fatal(err)
	}
	approxEqual(t, "hello world", b.Vectors[0], want, 0)
}

// TestCacheShares checks that Encoders of one model directory and options
// share one load, that closing one leaves the others working, and that
// the last Close releases the sessions.
func TestCacheShares(t *testing.T) {
	skipWithoutORT(t)
	ref := load(t, "testdata/tiny-bert", nil)
	b, err := ref.EncodeQueries(context.Background(), []string{"hello world"})
	if err != nil {
		t.Fatal(err)
	}
	want := b.Vectors[0]

	var c Cache
	abs, err := filepath.Abs("testdata/tiny-bert")
	if err != nil {
		t.Fatal(err)
	}
	x := cacheLoad(t, &c, "testdata/tiny-bert", nil)
	y := cacheLoad(t, &c, abs, &Options{}) // another spelling of the same key
	wantStats(t, &c, CacheStats{Loads: 1, Models: 1, Encoders: 2})
	if x.loaded != y.loaded || x == y {
		t.Fatal("two Encoders of one model do not share its load, or are one Encoder")
	}
	encodeOK(t, x, want)
	encodeOK(t, y, want)

	// Other options shape other sessions: a load of their own.
	z := cacheLoad(t, &c, "testdata/tiny-bert", &Options{IntraOpThreads: 1})
	wantStats(t, &c, CacheStats{Loads: 2, Models: 2, Encoders: 3})
	if z.loaded == x.loaded {
		t.Fatal("Encoders with different thread budgets share a load")
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	wantStats(t, &c, CacheStats{Loads: 2, Models: 1, Encoders: 2})

	// Closing one leaves the other working; a second Close changes nothing.
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.EncodeQueries(context.Background(), []string{"hello"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed Encoder: %v, want ErrClosed", err)
	}
	wantStats(t, &c, CacheStats{Loads: 2, Models: 1, Encoders: 1})
	encodeOK(t, y, want)
	l := y.loaded
	if err := y.Close(); err != nil {
		t.Fatal(err)
	}
	wantStats(t, &c, CacheStats{Loads: 2})
	if l.sessions != nil || l.models != nil {
		t.Fatal("the last Close left the sessions open")
	}

	// Released: the next Load reads the model again.
	w := cacheLoad(t, &c, "testdata/tiny-bert", nil)
	defer w.Close()
	wantStats(t, &c, CacheStats{Loads: 3, Models: 1, Encoders: 1})
	encodeOK(t, w, want)
}

// TestCacheConcurrentLoads checks that concurrent Loads of one key load
// the model once and share it.
func TestCacheConcurrentLoads(t *testing.T) {
	skipWithoutORT(t)
	var c Cache
	encs := make([]*Encoder, 8)
	errs := make([]error, len(encs))
	var wg sync.WaitGroup
	for i := range encs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			encs[i], errs[i] = c.Load("testdata/tiny-bert", nil)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		if encs[i].loaded != encs[0].loaded {
			t.Fatalf("load %d has a load of its own", i)
		}
	}
	wantStats(t, &c, CacheStats{Loads: 1, Models: 1, Encoders: len(encs)})
	for _, e := range encs {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	wantStats(t, &c, CacheStats{Loads: 1})
}

// TestCacheLoadError checks that a failed load is reported and not kept:
// the next Load tries again.
func TestCacheLoadError(t *testing.T) {
	skipWithoutORT(t)
	var c Cache
	for range 2 {
		if _, err := c.Load("testdata/no-such-model", nil); !errors.Is(err, ErrNoConfig) {
			t.Fatalf("load of a missing model: %v, want ErrNoConfig", err)
		}
	}
	wantStats(t, &c, CacheStats{Loads: 2})
	if _, err := c.Load("testdata/tiny-bert", &Options{IntraOpThreads: -1}); err == nil {
		t.Fatal("negative option accepted")
	}
}
