package latecollect

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// clusteredUnit draws n unit vectors near 300 random unit centres.
func clusteredUnit(r *rand.Rand, n, dim int) []float32 {
	centres := make([][]float32, 300)
	for i := range centres {
		centres[i] = randomUnit(r, 1, dim)
	}
	x := make([]float32, 0, n*dim)
	for range n {
		c := centres[r.IntN(len(centres))]
		v := make([]float32, dim)
		for j := range v {
			v[j] = c[j] + float32(r.NormFloat64()*0.1)
		}
		normalizeRows(v, dim)
		x = append(x, v...)
	}
	return x
}

// meanBestIP is k-means' objective for unit vectors: the mean over the
// points of the inner product with the nearest centroid (exact).
func meanBestIP(t *testing.T, x, cent []float32, dim int) float64 {
	q, err := faiss.NewQuantizer(cent, dim)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	a := make([]int32, len(x)/dim)
	if err := q.Assign(x, a); err != nil {
		t.Fatal(err)
	}
	var s float64
	for i, c := range a {
		s += float64(dot(x[i*dim:(i+1)*dim], cent[int(c)*dim:]))
	}
	return s / float64(len(a))
}

// Two-level k-means clusters as well as FAISS's exact k-means (the mean
// inner product of a point with its centroid within 0.01; exactKMeans
// within 0.002), gives unit
// centroids, and gives the same ones again for the same seed.
func TestTwoLevelKMeans(t *testing.T) {
	const dim, k, n = 32, 1024, 30000
	x := clusteredUnit(rand.New(rand.NewPCG(4, 2)), n, dim)
	ref, err := faiss.KMeans(x, dim, k, faiss.KMeansOptions{Iterations: kmeansIterations, Spherical: true, Seed: kmeansSeed})
	if err != nil {
		t.Fatal(err)
	}
	got, err := twoLevelKMeans(context.Background(), x, dim, k, kmeansIterations, kmeansSeed)
	if err != nil {
		t.Fatal(err)
	}
	for c := range k {
		var ss float64
		for _, v := range got[c*dim : (c+1)*dim] {
			ss += float64(v) * float64(v)
		}
		if math.Abs(ss-1) > 1e-4 {
			t.Fatalf("centroid %d has squared norm %v, want 1", c, ss)
		}
	}
	ours, err := exactKMeans(context.Background(), x, dim, k, kmeansIterations, kmeansSeed)
	if err != nil {
		t.Fatal(err)
	}
	exact, two, goExact := meanBestIP(t, x, ref, dim), meanBestIP(t, x, got, dim), meanBestIP(t, x, ours, dim)
	t.Logf("mean inner product with the nearest centroid: FAISS k-means %.4f, two-level %.4f, exact (Go) %.4f", exact, two, goExact)
	if two < exact-0.01 {
		t.Errorf("two-level k-means: mean inner product %.4f, FAISS's %.4f", two, exact)
	}
	if goExact < exact-0.002 {
		t.Errorf("exact k-means: mean inner product %.4f, FAISS's %.4f", goExact, exact)
	}
	again, err := twoLevelKMeans(context.Background(), x, dim, k, kmeansIterations, kmeansSeed)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again, got) {
		t.Error("two-level k-means gave other centroids for the same seed")
	}
	if _, err := twoLevelKMeans(context.Background(), x[:10*dim], dim, 11, 1, 1); err == nil {
		t.Error("11 centroids from 10 points: no error")
	}
}

// The two-level assigner picks, for clustered unit vectors and 2,048
// spherical centroids, the exact assignment's centroid for nearly every
// vector and one almost as close for the others; it never scores above
// the exact best.
func TestTwoLevelAssigner(t *testing.T) {
	withoutI8Assign(t)
	const dim, nlist, n = 32, 2048, 30000
	x := clusteredUnit(rand.New(rand.NewPCG(8, 8)), n, dim)
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
	// The AVX-512 path (where the CPU has it) and BLAS's pick the same
	// centroids, up to ties in the last bits.
	useLaneAssign = false
	blasGot := make([]int32, n)
	err = two.Assign(x, blasGot)
	useLaneAssign = true
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if b, g := dot(x[i*dim:(i+1)*dim], cent[int(blasGot[i])*dim:]), dot(x[i*dim:(i+1)*dim], cent[int(got[i])*dim:]); math.Abs(float64(b-g)) > 1e-5 {
			t.Fatalf("vector %d: centroid %d (%v), with BLAS's products %d (%v)", i, got[i], g, blasGot[i], b)
		}
	}
	if err := two.Assign(x[:dim+1], got[:1]); err == nil {
		t.Error("Assign of a partial vector: no error")
	}
}

// The exact assigner picks FAISS flat search's centroid, or one that
// scores the same to rounding, for every row, with the rows cut into
// chunks shared by goroutines.
func TestExactAssigner(t *testing.T) {
	withoutI8Assign(t)
	const dim, nlist, n = 48, 3000, 5000
	r := rand.New(rand.NewPCG(3, 7))
	x := clusteredUnit(r, n, dim)
	cent := randomUnit(r, nlist, dim)
	ref, err := faiss.NewQuantizer(cent, dim)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	a, err := newExactAssigner(cent, dim)
	if err != nil {
		t.Fatal(err)
	}
	want, got := make([]int32, n), make([]int32, n)
	if err := ref.Assign(x, want); err != nil {
		t.Fatal(err)
	}
	if err := a.Assign(x, got); err != nil {
		t.Fatal(err)
	}
	same := 0
	for i := range n {
		if got[i] == want[i] {
			same++
			continue
		}
		b, g := dot(x[i*dim:(i+1)*dim], cent[int(want[i])*dim:]), dot(x[i*dim:(i+1)*dim], cent[int(got[i])*dim:])
		if math.Abs(float64(b-g)) > 1e-5 {
			t.Fatalf("row %d: centroid %d scores %v, FAISS's %d %v", i, got[i], g, want[i], b)
		}
	}
	t.Logf("%d of %d rows on FAISS's centroid (the others tie to rounding)", same, n)
	// One row, and a row of NaNs.
	if err := a.Assign(x[:dim], got[:1]); err != nil || got[0] != want[0] && dot(x[:dim], cent[int(got[0])*dim:]) < dot(x[:dim], cent[int(want[0])*dim:])-1e-5 {
		t.Errorf("one row: centroid %d, err %v; want %d", got[0], err, want[0])
	}
	nan := make([]float32, dim)
	for j := range nan {
		nan[j] = float32(math.NaN())
	}
	if err := a.Assign(nan, got[:1]); err == nil {
		t.Error("a row of NaNs: no error")
	}
	if err := a.Assign(x[:dim+1], got[:1]); err == nil {
		t.Error("Assign of a partial vector: no error")
	}
}

// BenchmarkAssign compares FAISS's exact flat search, exact assignment
// on every core and two-level assignment (probing 8 and 16 groups) of
// 16,384 tokens, at the shapes of 100,000 128-token 128-d documents
// (16,384 centroids), of SciFact with bge-small (8,192 × 384) and of
// 4,096 128-d centroids. ns/token is per token.
func BenchmarkAssign(b *testing.B) {
	const n = 16384
	for _, shape := range []struct{ dim, nlist int }{{128, 32768}, {128, 16384}, {384, 8192}, {128, 4096}} {
		dim, nlist := shape.dim, shape.nlist
		r := rand.New(rand.NewPCG(9, 9))
		cent := randomUnit(r, nlist, dim)
		x := randomUnit(r, n, dim)
		out := make([]int32, n)
		exact, err := faiss.NewQuantizer(cent, dim)
		if err != nil {
			b.Fatal(err)
		}
		goExact, err := newExactAssigner(cent, dim)
		if err != nil {
			b.Fatal(err)
		}
		two8, err := newTwoLevel(cent, dim, 8)
		if err != nil {
			b.Fatal(err)
		}
		two16, err := newTwoLevel(cent, dim, 16)
		if err != nil {
			b.Fatal(err)
		}
		// The coarse scores in float32 where they would be in int8.
		useI8Coarse = false
		two8f, err := newTwoLevel(cent, dim, 8)
		useI8Coarse = true
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range []struct {
			name string
			a    assigner
		}{{"faiss-exact", exact}, {"exact", goExact}, {"two-level-8", two8}, {"two-level-8-f32coarse", two8f}, {"two-level-16", two16}} {
			// This package's assigners with BLAS's products and, where the
			// CPU has AVX-512, with argmax8x32AVX512.
			kernels := []bool{false}
			if a.name != "faiss-exact" && useAVX512 {
				kernels = append(kernels, true)
			}
			for _, lanes := range kernels {
				name := a.name
				if a.name != "faiss-exact" {
					name += map[bool]string{false: "/blas", true: "/avx512"}[lanes]
				}
				useLaneAssign = lanes
				b.Run(fmt.Sprintf("%dx%d/%s", nlist, dim, name), func(b *testing.B) {
					for b.Loop() {
						if err := a.a.Assign(x, out); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/token")
				})
				useLaneAssign = true
			}
		}
		exact.Close()
	}
}

// BenchmarkKMeans compares FAISS's k-means with exact assignment and
// two-level k-means: 131,072 clustered 128-d points into 4,096 centroids,
// 10 iterations (run with -benchtime 1x).
func BenchmarkKMeans(b *testing.B) {
	const dim, k, n = 128, 4096, 131072
	x := clusteredUnit(rand.New(rand.NewPCG(1, 1)), n, dim)
	b.Run("faiss", func(b *testing.B) {
		for b.Loop() {
			if _, err := faiss.KMeans(x, dim, k, faiss.KMeansOptions{Iterations: kmeansIterations, Spherical: true, Seed: kmeansSeed}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("exact", func(b *testing.B) {
		for b.Loop() {
			if _, err := exactKMeans(context.Background(), x, dim, k, kmeansIterations, kmeansSeed); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("two-level", func(b *testing.B) {
		for b.Loop() {
			if _, err := twoLevelKMeans(context.Background(), x, dim, k, kmeansIterations, kmeansSeed); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestExactAssignerLanes checks the AVX-512 assignment against BLAS's:
// the same centroid, or one whose product differs only by rounding, for
// centroid counts that do and do not fill whole groups of 8 and row counts
// that do and do not fill groups of 32; the lowest id among identical
// centroids; and an error for a row of NaNs.
func TestExactAssignerLanes(t *testing.T) {
	withoutI8Assign(t)
	if !useAVX512 {
		t.Skip("skipping: no AVX-512 on this CPU")
	}
	r := rand.New(rand.NewPCG(4, 9))
	for _, dim := range []int{8, 48} {
		for _, nlist := range []int{1, 5, 8, 3003} {
			cent := randomUnit(r, nlist, dim)
			a, err := newExactAssigner(cent, dim)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{1, 37, 1100} {
				x := clusteredUnit(r, n, dim)
				want, got := make([]int32, n), make([]int32, n)
				useLaneAssign = false
				err := a.Assign(x, want)
				useLaneAssign = true
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Assign(x, got); err != nil {
					t.Fatal(err)
				}
				for i := range n {
					if got[i] == want[i] {
						continue
					}
					row := x[i*dim : (i+1)*dim]
					b, g := dot(row, cent[int(want[i])*dim:]), dot(row, cent[int(got[i])*dim:])
					if math.Abs(float64(b-g)) > 1e-5 {
						t.Fatalf("dim %d nlist %d n %d: row %d: centroid %d scores %v, BLAS's %d %v", dim, nlist, n, i, got[i], g, want[i], b)
					}
				}
			}
		}
	}
	// Centroids 3, 8 and 11 are the same: a row nearest them goes to 3.
	const dim = 16
	cent := randomUnit(r, 13, dim)
	copy(cent[8*dim:9*dim], cent[3*dim:4*dim])
	copy(cent[11*dim:12*dim], cent[3*dim:4*dim])
	a, err := newExactAssigner(cent, dim)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int32, 2)
	if err := a.Assign(slices.Concat(cent[3*dim:4*dim], cent[11*dim:12*dim]), got); err != nil {
		t.Fatal(err)
	}
	if got[0] != 3 || got[1] != 3 {
		t.Errorf("rows equal to centroids 3, 8 and 11 went to %v, want 3", got)
	}
	nan := make([]float32, dim)
	for j := range nan {
		nan[j] = float32(math.NaN())
	}
	if err := a.Assign(nan, got[:1]); err == nil {
		t.Error("a row of NaNs: no error")
	}
}

// BenchmarkExactAssign measures exact assignment of 4,096 384-d tokens to
// 8,192 centroids (SciFact's largest k-means) on every core, with
// OpenBLAS's products, with the AVX-512 float kernel and with the VNNI
// int8 kernel.
func BenchmarkExactAssign(b *testing.B) {
	const dim, nlist, n = 384, 8192, 4096
	r := rand.New(rand.NewPCG(5, 9))
	x, cent := randomUnit(r, n, dim), randomUnit(r, nlist, dim)
	out := make([]int32, n)
	modes := []string{"blas"}
	if useAVX512 {
		modes = append(modes, "avx512")
	}
	if i8Assign(dim) {
		modes = append(modes, "vnni-i8")
	}
	defer func() { useLaneAssign, useI8Assign = true, true }()
	for _, mode := range modes {
		useLaneAssign, useI8Assign = mode != "blas", mode == "vnni-i8"
		a, err := newExactAssigner(cent, dim)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				if err := a.Assign(x, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*nlist*dim*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}

// topGroups picks what sorting does: the k largest values, largest first,
// the lower index first among equal ones; with the AVX-512 kernel and
// without.
func TestTopGroups(t *testing.T) {
	saved := useTopKAVX512
	defer func() { useTopKAVX512 = saved }()
	for _, vec := range []bool{false, true} {
		if vec && !useAVX512 {
			t.Log("no AVX-512: the portable topGroups only")
			continue
		}
		useTopKAVX512 = vec
		testTopGroups(t)
	}
}

func testTopGroups(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 11))
	for _, n := range []int{1, 2, 7, 64, 200} {
		for _, k := range []int{1, 3, 8, 64, 300} {
			for range 20 {
				row := make([]float32, n)
				for i := range row {
					row[i] = float32(r.IntN(5)) // many ties
				}
				want := make([]int32, n)
				for i := range want {
					want[i] = int32(i)
				}
				slices.SortStableFunc(want, func(a, b int32) int { return -cmp.Compare(row[a], row[b]) })
				want = want[:min(k, n)]
				got := topGroups(row, k, []int32{-7})
				if got[0] != -7 || !slices.Equal(got[1:], want) {
					t.Fatalf("n %d k %d row %v: %v, want %v after the -7 already there", n, k, row, got, want)
				}
			}
		}
	}
	// Coarse scores as two-level assignment has them: distinct values,
	// 128 and 256 groups, 8 probed; and rows whose ties at the floor
	// exceed what the filter keeps.
	for _, n := range []int{32, 128, 256, 512, 1000, 1024} {
		for _, k := range []int{1, 2, 4, 8, 16, 64} {
			for rep := range 50 {
				row := make([]float32, n)
				for i := range row {
					row[i] = float32(r.NormFloat64())
					switch rep % 5 {
					case 0:
						row[i] = float32(r.IntN(3))
					case 2:
						// Ties, but fewer than the kernel's 64 candidates.
						row[i] = float32(r.IntN(4 * n))
					case 1:
						// Zeros of both signs compare equal.
						row[i] = float32(r.IntN(3)-1) * float32(math.Copysign(0, float64(r.IntN(2))-0.5))
						if r.IntN(4) == 0 {
							row[i] = float32(r.NormFloat64())
						}
					}
				}
				want := make([]int32, n)
				for i := range want {
					want[i] = int32(i)
				}
				slices.SortStableFunc(want, func(a, b int32) int { return -cmp.Compare(row[a], row[b]) })
				if got := topGroups(row, k, nil); !slices.Equal(got, want[:min(k, n)]) {
					t.Fatalf("n %d k %d: %v, want %v", n, k, got, want[:min(k, n)])
				}
			}
		}
	}
}

// BenchmarkTopGroups picks the 8 best of 128 and 256 coarse scores, as
// coding against 16,384 and 65,536 centroids does for every token.
func BenchmarkTopGroups(b *testing.B) {
	for _, n := range []int{128, 256} {
		r := rand.New(rand.NewPCG(3, 5))
		rows := make([]float32, 1024*n)
		for i := range rows {
			rows[i] = float32(r.NormFloat64())
		}
		// full is the pass over every value that topGroups made before
		// it took the floor.
		b.Run(fmt.Sprintf("groups=%d/full", n), func(b *testing.B) {
			out := make([]int32, 0, 8)
			for i := 0; b.Loop(); i++ {
				j := i % 1024
				out = topOf(rows[j*n:(j+1)*n], nil, twoLevelProbe, out[:0])
			}
		})
		for _, vec := range []bool{false, true} {
			if vec && !useAVX512 {
				continue
			}
			name := map[bool]string{false: "floor", true: "avx512"}[vec]
			b.Run(fmt.Sprintf("groups=%d/%s", n, name), func(b *testing.B) {
				saved := useTopKAVX512
				defer func() { useTopKAVX512 = saved }()
				useTopKAVX512 = vec
				out := make([]int32, 0, 8)
				for i := 0; b.Loop(); i++ {
					j := i % 1024
					out = topGroups(rows[j*n:(j+1)*n], twoLevelProbe, out[:0])
				}
			})
		}
	}
}
