package dense

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/storage"
)

var (
	benchLarge = flag.Bool("dense.large", false, "also run the 1M-vector dense benchmarks (tens of minutes, about 8 GiB of memory)")
	benchHNSW  = flag.Bool("dense.hnsw1m", false, "with -dense.large, also build HNSW32 over 1M vectors (about 15 minutes on 2 cores)")
)

// benchFixture is one synthetic collection in storage, with the queries,
// filters and exact answers the benchmarks measure against.
type benchFixture struct {
	vecs    [][]float32
	nums    []uint64
	queries [][]float32
	filters map[string]*roaring64.Bitmap // by name; "none" is nil
	truth   map[string][][]Hit           // exact top 10 per filter and query
	st      Store
	built   map[string]*builtIndex // by description
	parent  *testing.B             // owns the built indexes
}

type builtIndex struct {
	x     *Index
	build time.Duration
}

var benchFilters = []struct {
	name string
	frac float64
}{{"none", 1}, {"50%", 0.5}, {"5%", 0.05}, {"0.5%", 0.005}, {"0.05%", 0.0005}}

func newBenchFixture(b *testing.B, n int) *benchFixture {
	b.Helper()
	start := time.Now()
	s := newSynth(384, 100, 77)
	f := &benchFixture{vecs: s.many(n), queries: s.many(100), filters: map[string]*roaring64.Bitmap{},
		truth: map[string][][]Hit{}, built: map[string]*builtIndex{}, parent: b}
	st := openStore(b, b.TempDir())
	f.st = st
	f.nums = putVectors(b, st, 0, f.vecs)
	rng := rand.New(rand.NewPCG(3, 3))
	for _, bf := range benchFilters {
		if bf.frac < 1 {
			f.filters[bf.name] = randomFilter(f.nums, bf.frac, rng)
		}
	}
	// Exact answers in Go, one query per worker (2 cores).
	for _, bf := range benchFilters {
		f.truth[bf.name] = make([][]Hit, len(f.queries))
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for qi := range next {
				scores := make([]float32, n)
				for i, v := range f.vecs {
					scores[i] = dot(f.queries[qi], v)
				}
				for _, bf := range benchFilters {
					f.truth[bf.name][qi] = topK(scores, f.nums, 10, f.filters[bf.name])
				}
			}
		}()
	}
	for qi := range f.queries {
		next <- qi
	}
	close(next)
	wg.Wait()
	b.Logf("fixture: %d vectors in storage and exact answers in %v", n, time.Since(start))
	return f
}

// index opens (and so builds, since the fixture has no snapshot) the
// index of description desc once per fixture.
func (f *benchFixture) index(b *testing.B, desc string) *builtIndex {
	if bi := f.built[desc]; bi != nil {
		return bi
	}
	start := time.Now()
	x, err := Open(context.Background(), f.st, &Options{Model: testModel, Dim: 384, Description: desc, SnapshotEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	bi := &builtIndex{x: x, build: time.Since(start)}
	f.built[desc] = bi
	f.parent.Cleanup(func() { x.Close() })
	return bi
}

// BenchmarkDense measures each index type at 100k (and with -dense.large
// 1M) synthetic 384-d vectors: recall@10 against exact search, query
// latency p50/p95, build time from storage and native memory, unfiltered
// and under random filters keeping 50%, 5%, 0.5% and 0.05% of documents.
//
// HNSW32 is FAISS 1.7.3's default efSearch of 16, which internal/faiss
// does not expose yet.
func BenchmarkDense(b *testing.B) {
	sizes := []int{100_000}
	if *benchLarge {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		f := newBenchFixture(b, n)
		nlist := int(4 * float64(isqrt(n)))
		types := []struct{ name, desc string }{
			{"Flat", "Flat"},
			{"auto", ""},
			{"HNSW32", "HNSW32"},
			{"IVF-SQ8", fmt.Sprintf("IVF%d,SQ8", nlist)},
		}
		for _, ty := range types {
			for _, bf := range benchFilters {
				b.Run(fmt.Sprintf("n=%dk/%s/filter=%s", n/1000, ty.name, bf.name), func(b *testing.B) {
					if ty.name == "HNSW32" && n > 100_000 && !*benchHNSW {
						b.Skip("HNSW32 over 1M vectors builds for about 15 minutes: run with -dense.hnsw1m")
					}
					bi := f.index(b, ty.desc)
					ctx := context.Background()
					allow := f.filters[bf.name]
					var sum float64
					for qi, q := range f.queries {
						hits, err := bi.x.Search(ctx, q, 10, allow)
						if err != nil {
							b.Fatal(err)
						}
						sum += recall(hits, f.truth[bf.name][qi])
					}
					lat := make([]time.Duration, 0, b.N)
					b.ReportAllocs()
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						t0 := time.Now()
						if _, err := bi.x.Search(ctx, f.queries[i%len(f.queries)], 10, allow); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(t0))
					}
					b.StopTimer()
					slices.Sort(lat)
					b.ReportMetric(sum/float64(len(f.queries)), "recall@10")
					b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
					b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*95/100)]), "p95_ms")
					if bf.name == "none" {
						b.ReportMetric(bi.build.Seconds(), "build_s")
						b.ReportMetric(float64(bi.x.Stats().MemoryBytes), "index_bytes")
					}
				})
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func isqrt(n int) int {
	r := 0
	for (r+1)*(r+1) <= n {
		r++
	}
	return r
}

// BenchmarkOpen measures opening a 100k-vector index: from its snapshot
// plus a catch-up of 1,000 changes, against a rebuild from storage.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	st := openStore(b, b.TempDir())
	s := newSynth(384, 100, 78)
	putVectors(b, st, 0, s.many(100_000))
	opts := &Options{Model: testModel, Dim: 384, SnapshotEvery: -1}
	x, err := Open(ctx, st, opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := x.Snapshot(ctx); err != nil {
		b.Fatal(err)
	}
	x.Close()
	putVectors(b, st, 100_000, s.many(1000))
	for _, mode := range []string{"snapshot", "rebuild"} {
		b.Run(mode, func(b *testing.B) {
			var src Store = st
			if mode == "rebuild" {
				src = noSnapshot{st}
			}
			b.ReportAllocs()
			var total time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				x, err := Open(ctx, src, opts)
				if err != nil {
					b.Fatal(err)
				}
				total += time.Since(t0)
				if x.Len() != 101_000 {
					b.Fatalf("opened with %d vectors, want 101000", x.Len())
				}
				x.Close()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "open_s")
		})
	}
}

// noSnapshot hides the stored snapshot, forcing a rebuild.
type noSnapshot struct{ *storage.Store }

func (noSnapshot) OpenSnapshot(string) (io.ReadCloser, uint64, error) {
	return nil, 0, storage.ErrNotFound
}
