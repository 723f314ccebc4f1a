package dense

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
)

var (
	benchCollection = flag.String("dense.collection", "", "directory of a collection `tandem bench ingest --keep` kept, for BenchmarkFilterPaths")
	benchModel      = flag.String("dense.model", "synthetic-384", "its dense model's name")
)

// BenchmarkFilterPaths measures the two ways Search can answer a filter
// on an IVF index with kept locations, on a collection tandem bench
// ingest built: the located search over the allowed documents' codes
// (SearchLocated), and the IVF search widened to NProbe·n/c lists with
// the filter as FAISS's selector. Neither rescores. Each filter keeps a
// random share of the documents; ten filters of each share take turns,
// so that consecutive searches do not find each other's codes in cache.
// These are the costs dense.subsetCheaper weighs (docs/ingest.md, "The
// 1% filter at 1M"):
//
//	go test ./dense -run '^$' -bench FilterPaths -dense.collection DIR
func BenchmarkFilterPaths(b *testing.B) {
	if *benchCollection == "" {
		b.Skip("no -dense.collection: give the directory of a kept tandem bench ingest collection")
	}
	ctx := context.Background()
	st := openStore(b, *benchCollection)
	x, err := Open(ctx, st, &Options{Model: *benchModel, Dim: 384, SnapshotEvery: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	if x.mu.loc == nil {
		b.Fatalf("%s: %s keeps no locations", *benchCollection, x.Stats().Description)
	}
	ids := x.DocNums()
	n := ids.GetCardinality()
	rng := rand.New(rand.NewPCG(3, 3))
	queries := make([][]float32, 50)
	for i := range queries {
		queries[i] = make([]float32, 384)
		for j := range queries[i] {
			queries[i][j] = float32(rng.NormFloat64())
		}
	}
	for _, frac := range []float64{0.01, 0.03, 0.05, 0.07, 0.1, 0.5} {
		allows := make([]*roaring64.Bitmap, 10)
		for i := range allows {
			allows[i] = roaring64.New()
			it := ids.Iterator()
			for it.HasNext() {
				if v := it.Next(); rng.Float64() < frac {
					allows[i].Add(v)
				}
			}
		}
		name := fmt.Sprintf("%.0f%%", frac*100)
		b.Run(name+"/located", func(b *testing.B) {
			x.mu.RLock()
			defer x.mu.RUnlock()
			for i := 0; b.Loop(); i++ {
				nums := allows[i%len(allows)].ToArray()
				if _, err := x.mu.fx.SearchLocated(ctx, queries[i%len(queries)], nums, x.mu.loc, 30, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/widened", func(b *testing.B) {
			x.mu.RLock()
			defer x.mu.RUnlock()
			for i := 0; b.Loop(); i++ {
				allow := allows[i%len(allows)]
				widen := float64(n) / float64(allow.GetCardinality())
				so := faiss.SearchOptions{Allow: allow, NProbe: int(min(math.Ceil(float64(x.opts.NProbe)*widen), float64(x.mu.nlist)))}
				if _, err := x.mu.fx.Search(ctx, queries[i%len(queries)], 30, so); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Logf("%s: %d allowed of %d; subsetCheaper picks located: %v", name, allows[0].GetCardinality(), n,
			x.subsetCheaper(n, allows[0].GetCardinality()))
	}
}
