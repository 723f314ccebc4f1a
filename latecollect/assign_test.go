package latecollect

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// The two-level assigner picks, for clustered unit vectors and 2,048
// spherical centroids, the exact assignment's centroid for nearly every
// vector and one almost as close for the others; it never scores above
// the exact best.
func TestTwoLevelAssigner(t *testing.T) {
	const dim, nlist, n = 32, 2048, 30000
	r := rand.New(rand.NewPCG(8, 8))
	centres := make([][]float32, 300)
	for i := range centres {
		centres[i] = randomUnit(r, 1, dim)
	}
	x := make([]float32, 0, n*dim)
	for range n {
		c := centres[r.IntN(len(centres))]
		v := make([]float32, dim)
		var ss float64
		for j := range v {
			v[j] = c[j] + float32(r.NormFloat64()*0.1)
			ss += float64(v[j]) * float64(v[j])
		}
		for j := range v {
			v[j] /= float32(math.Sqrt(ss))
		}
		x = append(x, v...)
	}
	cent, err := faiss.KMeans(x, dim, nlist, faiss.KMeansOptions{Iterations: 4, Spherical: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	exact, err := faiss.NewQuantizer(cent, dim)
	if err != nil {
		t.Fatal(err)
	}
	defer exact.Close()
	two, err := newTwoLevel(cent, dim, twoLevelProbe)
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	want, got := make([]int32, n), make([]int32, n)
	if err := exact.Assign(x, want); err != nil {
		t.Fatal(err)
	}
	if err := two.Assign(x, got); err != nil {
		t.Fatal(err)
	}
	same, worst := 0, 0.0
	for i := range n {
		if got[i] == want[i] {
			same++
			continue
		}
		b, g := dot(x[i*dim:(i+1)*dim], cent[int(want[i])*dim:]), dot(x[i*dim:(i+1)*dim], cent[int(got[i])*dim:])
		if g > b+1e-5 {
			t.Fatalf("vector %d: two-level centroid %d scores %v, above the exact best %d's %v", i, got[i], g, want[i], b)
		}
		worst = max(worst, float64(b-g))
	}
	t.Logf("two-level assignment (%d groups, probe %d): %.4f of %d vectors on the exact centroid, worst loss %.4f", len(two.ids), two.probe, float64(same)/n, n, worst)
	if float64(same)/n < 0.95 {
		t.Errorf("two-level assignment agrees with exact on %.4f of vectors, want at least 0.95", float64(same)/n)
	}
	if err := two.Assign(x[:dim+1], got[:1]); err == nil {
		t.Error("Assign of a partial vector: no error")
	}
}

// BenchmarkAssign compares exact and two-level assignment of 16,384
// 128-d tokens to 16,384 centroids (the count of 100,000 128-token
// documents). ns/token is per token.
func BenchmarkAssign(b *testing.B) {
	const dim, nlist, n = 128, 16384, 16384
	r := rand.New(rand.NewPCG(9, 9))
	cent := randomUnit(r, nlist, dim)
	x := randomUnit(r, n, dim)
	out := make([]int32, n)
	exact, err := faiss.NewQuantizer(cent, dim)
	if err != nil {
		b.Fatal(err)
	}
	defer exact.Close()
	two, err := newTwoLevel(cent, dim, twoLevelProbe)
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range []struct {
		name string
		a    assigner
	}{{"exact", exact}, {"two-level", two}} {
		b.Run(a.name, func(b *testing.B) {
			for b.Loop() {
				if err := a.a.Assign(x, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/token")
		})
	}
}
