//go:build cgo

package faiss

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkTrain trains IVF512,SQ8 on 20,000 384-d vectors with Train
// (FAISS's k-means, one BLAS thread) and with TrainThreaded on 2 threads;
// BenchmarkAssign assigns 16,384 vectors to 2,048 lists on 1 and 2
// goroutines. Run: go test -run - -bench 'Train|Assign' ./internal/faiss
func BenchmarkTrain(b *testing.B) {
	const d, n = 384, 20_000
	vecs := randomVectors(rand.New(rand.NewPCG(1, 2)), n, d)
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			for b.Loop() {
				x, err := New(d, "IVF512,SQ8", InnerProduct)
				if err != nil {
					b.Fatal(err)
				}
				if err := x.TrainThreaded(vecs, threads); err != nil {
					b.Fatal(err)
				}
				x.Close()
			}
		})
	}
}

func BenchmarkAssign(b *testing.B) {
	const d, n = 384, 16_384
	rng := rand.New(rand.NewPCG(3, 4))
	x, err := New(d, "IVF2048,SQ8", InnerProduct)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	if err := x.TrainThreaded(randomVectors(rng, 2048*39, d), 2); err != nil {
		b.Fatal(err)
	}
	vecs := randomVectors(rng, n, d)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for b.Loop() {
				if _, err := x.Assign(vecs, workers); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
