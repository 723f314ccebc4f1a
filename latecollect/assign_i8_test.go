package latecollect

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// withoutI8Assign makes the assigners built until the test ends assign in
// float, for the tests that hold the float kernels to each other.
func withoutI8Assign(t testing.TB) {
	old := useI8Assign
	useI8Assign = false
	t.Cleanup(func() { useI8Assign = old })
}

// argmaxI8Go is argmaxI8x32VNNI's portable twin: for each quantised row i
// of q (q8 + 128, dim bytes each, from quantizeRowsI8), best[i] and idx[i]
// become the best score scale_j * float32(<q8_i, c8_j>) over the centroids
// of c, and the lowest centroid among equal scores.
func argmaxI8Go(q []byte, c *centI8, best []float32, idx []int32) {
	dim := c.dim
	for i := range len(q) / dim {
		row := q[i*dim : (i+1)*dim]
		for j := range c.k {
			cr := c.c8[j*dim : (j+1)*dim]
			var a int32
			for k, b := range row {
				a += int32(int8(b-128)) * int32(int8(cr[k]))
			}
			if v := float32(a) * c.scale[j]; v > best[i] {
				best[i], idx[i] = v, int32(j)
			}
		}
	}
}

// The VNNI kernel gives argmaxI8Go's scores and centroids bit for bit, for
// centroid counts that do and do not fill groups of 8, row counts that do
// and do not fill the 32 lanes, centroids run in blocks, and identical
// centroids (the lowest id wins).
func TestArgmaxI8Kernel(t *testing.T) {
	if !useVNNI {
		t.Skip("skipping: no AVX-512 VNNI on this CPU")
	}
	r := rand.New(rand.NewPCG(12, 5))
	for _, dim := range []int{4, 48, 384} {
		for _, nlist := range []int{1, 5, 8, 13, 1003} {
			cent := randomUnit(r, nlist, dim)
			if nlist > 8 {
				copy(cent[8*dim:9*dim], cent[3*dim:4*dim])
			}
			c := newCentI8(cent, dim)
			for _, n := range []int{1, 31, 32} {
				x := clusteredUnit(r, n, dim)
				if nlist > 8 {
					copy(x[:dim], cent[3*dim:4*dim])
				}
				q := make([]byte, n*dim)
				if err := quantizeRowsI8(x, dim, q); err != nil {
					t.Fatal(err)
				}
				lanes := make([]byte, 32*dim)
				layLanes(lanes, q, dim)
				best, idx := make([]float32, 32), make([]int32, 32)
				wantBest, wantIdx := make([]float32, n), make([]int32, n)
				for i := range best {
					best[i], idx[i] = float32(math.Inf(-1)), -1
				}
				for i := range wantBest {
					wantBest[i], wantIdx[i] = float32(math.Inf(-1)), -1
				}
				// In blocks of 16 centroids, as assignI8 runs blocks.
				for c0 := 0; c0 < nlist; c0 += 16 {
					c.argmax(lanes, c0, min(c0+16, nlist), best, idx, 0)
				}
				argmaxI8Go(q, c, wantBest, wantIdx)
				for i := range n {
					if math.Float32bits(best[i]) != math.Float32bits(wantBest[i]) || idx[i] != wantIdx[i] {
						t.Fatalf("dim %d nlist %d n %d: row %d: kernel %v (centroid %d), Go %v (centroid %d)", dim, nlist, n, i, best[i], idx[i], wantBest[i], wantIdx[i])
					}
				}
				if nlist > 8 && idx[0] != 3 {
					t.Errorf("dim %d nlist %d: a row equal to centroids 3 and 8 went to %d", dim, nlist, idx[0])
				}
			}
		}
	}
}

// Exact int8 assignment puts a token on the float nearest centroid
// (FAISS's flat search), or on one whose float score is within the
// quantisation's error of it; two-level int8 assignment agrees with it as
// often as two-level float assignment does (TestTwoLevelAssigner). A row
// that is not finite is an error.
func TestI8AssignerAgrees(t *testing.T) {
	if !useVNNI {
		t.Skip("skipping: no AVX-512 VNNI on this CPU")
	}
	const dim, nlist, n = 64, 2048, 30000
	x := clusteredUnit(rand.New(rand.NewPCG(8, 9)), n, dim)
	cent, err := faiss.KMeans(x, dim, nlist, faiss.KMeansOptions{Iterations: 4, Spherical: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := faiss.NewQuantizer(cent, dim)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	want := make([]int32, n)
	if err := ref.Assign(x, want); err != nil {
		t.Fatal(err)
	}
	ex, err := newExactAssigner(cent, dim)
	if err != nil {
		t.Fatal(err)
	}
	if ex.i8 == nil {
		t.Fatal("exact assigner: not int8 on a CPU with VNNI")
	}
	two, err := newTwoLevel(cent, dim, twoLevelProbe)
	if err != nil {
		t.Fatal(err)
	}
	if two.i8 == nil {
		t.Fatal("two-level assigner: not int8 on a CPU with VNNI")
	}
	// Two-level assignment misses the nearest centroid for a few tokens
	// in float too (TestTwoLevelAssigner), by up to a large margin.
	for _, c := range []struct {
		name        string
		a           assigner
		share, loss float64
	}{{"exact", ex, 0.97, 0.02}, {"two-level", two, 0.95, 1}} {
		got := make([]int32, n)
		if err := c.a.Assign(x, got); err != nil {
			t.Fatal(err)
		}
		same, worst, loss := 0, 0.0, 0.0
		for i := range n {
			if got[i] == want[i] {
				same++
				continue
			}
			row := x[i*dim : (i+1)*dim]
			b, g := dot(row, cent[int(want[i])*dim:]), dot(row, cent[int(got[i])*dim:])
			worst = max(worst, float64(b-g))
			loss += float64(b - g)
		}
		t.Logf("%s in int8: %.4f of %d rows on the float nearest centroid; score lost: worst %.4f, mean %.6f", c.name, float64(same)/n, n, worst, loss/n)
		if float64(same)/n < c.share || worst > c.loss {
			t.Errorf("%s in int8: %.4f of rows on the float nearest centroid (want ≥ %v), worst loss %.4f (want ≤ %v)", c.name, float64(same)/n, c.share, worst, c.loss)
		}
		nan := slices.Clone(x[:dim])
		nan[5] = float32(math.NaN())
		if err := c.a.Assign(nan, got[:1]); err == nil {
			t.Errorf("%s: a row with a NaN: no error", c.name)
		}
	}

	// The coarse scores in int8 pick the groups the float ones pick, up to
	// near ties: two-level assignment finds the nearest centroid about as
	// often either way, and loses about as much score.
	if two.coarseLanes == nil {
		t.Fatal("two-level assigner: coarse scores not in int8 on a CPU with VNNI")
	}
	useI8Coarse = false
	twoF, err := newTwoLevel(cent, dim, twoLevelProbe)
	useI8Coarse = true
	if err != nil {
		t.Fatal(err)
	}
	if twoF.coarseLanes != nil {
		t.Fatal("two-level assigner: int8 coarse scores while turned off")
	}
	var share, mean [2]float64
	var gots [2][]int32
	for j, a := range []*twoLevel{twoF, two} {
		got := make([]int32, n)
		gots[j] = got
		if err := a.Assign(x, got); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			row := x[i*dim : (i+1)*dim]
			if got[i] == want[i] {
				share[j]++
			}
			mean[j] += float64(dot(row, cent[int(want[i])*dim:]) - dot(row, cent[int(got[i])*dim:]))
		}
		share[j] /= n
		mean[j] /= n
	}
	differ := 0
	for i := range n {
		if gots[0][i] != gots[1][i] {
			differ++
		}
	}
	t.Logf("two-level, coarse scores in float32 / int8: %.4f / %.4f of rows on the nearest centroid; mean loss %.6f / %.6f; %d rows assigned differently", share[0], share[1], mean[0], mean[1], differ)
	if share[1] < share[0]-0.003 || mean[1] > mean[0]*1.1+1e-4 {
		t.Errorf("int8 coarse scores: %.4f of rows on the nearest centroid, mean loss %.6f; float32: %.4f, %.6f", share[1], mean[1], share[0], mean[0])
	}
}

// quantizeRowsI8 gives each value v/scaleI8(row) rounded to the nearest
// integer (within 0.5, at most 127 in size), and refuses a row that is
// not finite.
func TestQuantizeRowsI8(t *testing.T) {
	const dim = 16
	r := rand.New(rand.NewPCG(3, 3))
	x := randomUnit(r, 50, dim)
	// Row 1 holds exact halves of its scale's steps; row 2 is zero.
	s := scaleI8(x[dim : 2*dim])
	for j := range dim {
		x[dim+j] = (float32(j) - 7.5) * s
	}
	x[dim] = 127 * s
	clear(x[2*dim : 3*dim])
	q := make([]byte, len(x))
	if err := quantizeRowsI8(x, dim, q); err != nil {
		t.Fatal(err)
	}
	for i := range len(x) / dim {
		row := x[i*dim : (i+1)*dim]
		s := scaleI8(row)
		for j, v := range row {
			got := float64(int8(q[i*dim+j] - 128))
			want := 0.0
			if s > 0 {
				want = float64(v) / float64(s)
			}
			if math.Abs(got-want) > 0.5 || math.Abs(got) > 127 {
				t.Fatalf("row %d value %d (%v, scale %v): %v, want %v rounded", i, j, v, s, got, want)
			}
		}
	}
	if got := int8(q[dim] - 128); got != 127 {
		t.Errorf("the largest value: %d, want 127", got)
	}
	x[3*dim+4] = float32(math.Inf(1))
	if err := quantizeRowsI8(x, dim, q); err == nil || err.Error() != "row 3 is not finite" {
		t.Errorf("a row with +Inf: %v", err)
	}
}

// The int8 centroid scores (dotI8x32VNNI) equal their Go twin's bit for
// bit, for query token counts that fill 16 and 32 lanes or not, centroid
// counts that do and do not fill groups of 8, and one or two workers; and
// they are the float scores within the quantisations' error.
func TestScoreCentroidsI8(t *testing.T) {
	if !i8Centroids(384) {
		t.Skip("skipping: no AVX-512 VNNI on this CPU")
	}
	r := rand.New(rand.NewPCG(3, 14))
	const dim = 384
	for _, nlist := range []int{5, 8, 13, 2051} {
		cent := randomUnit(r, nlist, dim)
		c := newCentI8(cent, dim)
		for _, nq := range []int{1, 16, 17, 32} {
			q := clusteredUnit(r, nq, dim)
			qi := newQueryI8(q, dim)
			if qi.kernel != i8VNNI {
				t.Fatalf("query not laid out for VNNI")
			}
			stride := chunkLanes(nq)
			for _, workers := range []int{1, 2} {
				table := make([]float32, (nlist+7)&^7*stride)[:nlist*stride]
				scoreCentroidsI8(qi, c, stride, table, workers)
				want := make([]float32, nlist*stride)
				fl := make([]float32, nlist*stride)
				if err := scoreCentroids(q, nq, dim, cent, stride, fl, 1, nil); err != nil {
					t.Fatal(err)
				}
				for j := range nlist {
					for l := range nq {
						var a int32
						for k := range dim {
							a += int32(qi.q8[l*dim+k]) * int32(int8(c.c8[j*dim+k]))
						}
						want[j*stride+l] = float32(a) * c.scale[j] * qi.scale[l]
					}
				}
				for i, v := range table {
					if math.Float32bits(v) != math.Float32bits(want[i]) {
						t.Fatalf("nlist %d nq %d workers %d: centroid %d token %d: kernel %v, Go %v", nlist, nq, workers, i/stride, i%stride, v, want[i])
					}
					if d := math.Abs(float64(v - fl[i])); d > 0.01 {
						t.Errorf("nlist %d nq %d: centroid %d token %d: int8 %v, float %v", nlist, nq, i/stride, i%stride, v, fl[i])
					}
				}
			}
		}
	}
}

// Two-level assignment's coarse scores in int8 (coarseScores8: the coarse
// centroids as lanes, rows written at a stride of all the groups) are the
// integer inner products of the quantised rows and coarse centroids, times
// the coarse centroid's scale, bit for bit; times the row's scale they are
// the float scores within the quantisations' error. Row counts that do
// and do not fill the kernel's groups of 8.
func TestCoarseScoresI8(t *testing.T) {
	if !useVNNI {
		t.Skip("skipping: no AVX-512 VNNI on this CPU")
	}
	const dim = 64
	r := rand.New(rand.NewPCG(7, 46))
	cent := randomUnit(r, 2048, dim)
	two, err := newTwoLevel(cent, dim, twoLevelProbe)
	if err != nil {
		t.Fatal(err)
	}
	ncoarse := len(two.ids)
	if two.coarseLanes == nil || ncoarse <= 32 {
		t.Fatalf("coarse scores not in int8, or %d groups (want more than 32)", ncoarse)
	}
	q8c := make([]byte, ncoarse*dim)
	if err := quantizeRowsI8(two.coarse, dim, q8c); err != nil {
		t.Fatal(err)
	}
	for _, b := range []int{1, 8, 13, 40} {
		rows := clusteredUnit(r, b, dim)
		sc := new(twoLevelScratch)
		sc.q8 = make([]byte, b*dim)
		if err := quantizeRowsI8(rows, dim, sc.q8); err != nil {
			t.Fatal(err)
		}
		cs := make([]float32, (b+7)&^7*ncoarse)[:b*ncoarse]
		two.coarseScores8(sc, b, cs)
		for i := range b {
			row := rows[i*dim : (i+1)*dim]
			for g := range ncoarse {
				var a int32
				for x := range dim {
					a += (int32(sc.q8[i*dim+x]) - 128) * (int32(q8c[g*dim+x]) - 128)
				}
				want := float32(a) * 1 * two.coarseScale[g]
				got := cs[i*ncoarse+g]
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%d rows: row %d group %d: kernel %v, Go %v", b, i, g, got, want)
				}
				if d := math.Abs(float64(got*scaleI8(row) - dot(row, two.coarse[g*dim:]))); d > 0.01 {
					t.Errorf("%d rows: row %d group %d: int8 %v, float %v", b, i, g, got*scaleI8(row), dot(row, two.coarse[g*dim:]))
				}
			}
		}
	}
}
