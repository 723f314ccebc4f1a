package fusion

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkFuse fuses three lists of 1000 hits with heavy overlap, the shape
// of a hybrid query at depth 1000; reports hits/op (fused hits produced).
func BenchmarkFuse(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	lists := make([]List, 3)
	for i := range lists {
		lists[i].Name = fmt.Sprint("r", i)
		for j, d := range rng.Perm(2000)[:1000] {
			lists[i].Items = append(lists[i].Items, Item{uint64(d), float64(1000 - j)})
		}
	}
	for _, m := range []Method{RRF, DBSF, CombMNZ} {
		b.Run(m.String(), func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				hits, err := Fuse(lists, Options{Method: m})
				if err != nil {
					b.Fatal(err)
				}
				n = len(hits)
			}
			b.ReportMetric(float64(n), "hits/op")
		})
	}
}
