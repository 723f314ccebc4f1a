package latecollect

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tandemsearch/tandem/internal/blas"
)

// Assigning tokens to centroids. Exact assignment compares every token
// with every centroid: tokens × centroids inner products, which grows past
// the rest of a build once the centroids number tens of thousands (a
// million 128-token documents take 65,536). From twoLevelCentroids
// centroids on, the centroids are grouped under coarse centroids (k-means
// over the centroids themselves, about √centroids groups); a token is
// compared with the coarse centroids, then with the centroids of its
// twoLevelProbe best groups only. It finds the nearest centroid for most
// tokens and a near one for the others, which only makes their residuals
// larger (TestTwoLevelAssigner measures how often and by how much).
//
// Tokens are coded in two levels from twoLevelCentroids (1,024) centroids,
// k-means assigns in two levels from twoLevelTrainCentroids (16,384). On
// SciFact (bge-small-en-v1.5, 8,192 centroids, built at Open from the
// store, the depth trace at K=100 over 300 queries; README), two-level
// coding ranked as exact coding (recall@100 against exhaustive 0.8973
// against 0.8982, qrels R@100 0.9650 against 0.9617) for 23% less build
// CPU; two-level k-means made worse centroids (0.8937, nDCG@10 0.7461
// against 0.7473), so it waits for centroid counts where exact k-means
// would not finish.
const (
	twoLevelCentroids      = 1024
	twoLevelTrainCentroids = 16384
	twoLevelProbe          = 8
	// assignBatch is the number of tokens whose coarse scores are
	// computed in one matrix product.
	assignBatch = 16384
)

// assigner assigns rows of dim values to the nearest centroid by inner
// product: out[i] for row i.
type assigner interface {
	Assign(rows []float32, out []int32) error
	Close() error
}

// twoLevelFrom is twoLevelCentroids and twoLevelProbes twoLevelProbe, for
// coding tokens; twoLevelTrainFrom (twoLevelTrainCentroids) and
// twoLevelTrainProbes are the same for k-means's assignment steps, whose
// last twoLevelTrainExact iterations assign exactly. Tests lower the
// thresholds to build small indexes with two-level assignment, and
// measurements set them all (TANDEM_TWO_LEVEL_FROM, _PROBE, _TRAIN_FROM,
// _TRAIN_PROBE, _TRAIN_EXACT).
var (
	twoLevelFrom        = twoLevelCentroids
	twoLevelProbes      = twoLevelProbe
	twoLevelTrainFrom   = twoLevelTrainCentroids
	twoLevelTrainProbes = twoLevelProbe
	twoLevelTrainExact  = 0
)

// newAssigner returns the assigner for a set of centroids: exact below
// twoLevelCentroids, the two-level one from there.
func newAssigner(cent []float32, dim int) (assigner, error) {
	if len(cent)/dim >= twoLevelFrom {
		return newTwoLevel(cent, dim, twoLevelProbes)
	}
	return newExactAssigner(cent, dim)
}

// exactAssigner compares every row with every centroid, a chunk of rows at
// a time, the chunks taken by one goroutine per core as each finishes its
// last, so that a core busy elsewhere (the encoder) does not hold the
// others back. With AVX-512 VNNI a chunk goes through argmaxI8x32VNNI, in
// int8 (assignI8, assign_i8.go); with AVX-512 alone through
// argmax8x32AVX512 (assignLanes); otherwise through one matrix product per block of
// centroids (internal/blas, single-threaded) and maxOf. FAISS's flat
// search does the same products on one core (Debian's FAISS 1.7.3 calls
// sgemm serially, and internal/blas pins OpenBLAS to one thread).
type exactAssigner struct {
	dim  int
	cent []float32
	k    int
	i8   *centI8 // the centroids in int8, where assignment runs in int8 (i8Assign)
}

func newExactAssigner(cent []float32, dim int) (*exactAssigner, error) {
	if dim <= 0 || len(cent) == 0 || len(cent)%dim != 0 {
		return nil, fmt.Errorf("exact assignment: %d centroid values of dimension %d", len(cent), dim)
	}
	a := &exactAssigner{dim: dim, cent: cent, k: len(cent) / dim}
	if i8Assign(dim) {
		a.i8 = newCentI8(cent, dim)
	}
	return a, nil
}

// exactRows and exactCents are the blocks of one product: rows ×
// centroids, as FAISS's flat search cuts them (a product with few rows
// spends its time packing the centroids).
const (
	exactRows  = 1024
	exactCents = 1024
)

// exactChunks cuts n rows into chunks for the workers, small batches finer
// so that every core has a share, each chunk a multiple of 32 rows (whole
// groups of lanes) but the last.
func exactChunks(n int) (chunk, chunks, workers int) {
	procs := runtime.GOMAXPROCS(0)
	chunk = max(32, (min(exactRows, (n+procs-1)/procs)+31)&^31)
	chunks = (n + chunk - 1) / chunk
	return chunk, chunks, max(1, min(procs, chunks))
}

// inChunks runs run over n rows cut into chunks (exactChunks), which one
// goroutine per core takes as it finishes its last, each with scratch of
// its own.
func (a *exactAssigner) inChunks(n int, run func(from, to int, s *laneScratch) error) error {
	chunk, chunks, workers := exactChunks(n)
	var next atomic.Int64
	errs := make([]error, workers)
	inParts(workers, workers, func(p, _, _ int) {
		var s laneScratch
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			from, to := c*chunk, min(n, (c+1)*chunk)
			if err := run(from, to, &s); err != nil {
				errs[p] = fmt.Errorf("exact assignment: rows %d to %d: %w", from, to, err)
				return
			}
		}
	})
	return errors.Join(errs...)
}

// Assign sets out[i] to the centroid with the largest inner product with
// row i, the lowest id among equals.
func (a *exactAssigner) Assign(rows []float32, out []int32) error {
	dim := a.dim
	if len(rows)%dim != 0 || len(out) != len(rows)/dim {
		return fmt.Errorf("exact assignment: %d values and %d outputs for dimension %d", len(rows), len(out), dim)
	}
	if a.i8 != nil || (useAVX512 && dim%8 == 0 && useLaneAssign) {
		run := a.assignLanes
		if a.i8 != nil {
			run = a.assignI8
		}
		return a.inChunks(len(out), func(from, to int, s *laneScratch) error {
			return run(rows[from*dim:to*dim], out[from:to], s)
		})
	}
	return a.inChunks(len(out), func(from, to int, s *laneScratch) error {
		cb := min(exactCents, a.k)
		m := to - from
		s.qt = slices.Grow(s.qt[:0], m*cb)[:m*cb] // the products
		s.best = slices.Grow(s.best[:0], m)[:m]
		best, scores := s.best, s.qt
		for i := range m {
			best[i] = float32(math.Inf(-1))
			out[from+i] = -1
		}
		for c0 := 0; c0 < a.k; c0 += cb {
			nc := min(cb, a.k-c0)
			if err := blas.MulT(rows[from*dim:to*dim], m, a.cent[c0*dim:(c0+nc)*dim], nc, dim, scores, nc); err != nil {
				return err
			}
			for i := range m {
				row := scores[i*nc : (i+1)*nc]
				if v := maxOf(row); v > best[i] {
					best[i], out[from+i] = v, int32(c0+slices.Index(row, v))
				}
			}
		}
		for i := range m {
			if out[from+i] < 0 {
				return fmt.Errorf("row %d matched no centroid (not finite?)", from+i)
			}
		}
		return nil
	})
}

// useLaneAssign selects exact assignment through argmax8x32AVX512 where
// the CPU has AVX-512; tests turn it off to compare with BLAS's products.
var useLaneAssign = true

// laneScratch is one worker's buffers for assignLanes.
type laneScratch struct {
	qt         []float32
	best       []float32
	idx        []int32
	pad        []float32
	q8, lanes8 []byte // assignI8's
}

// assignLanes is Assign over one chunk of rows with the AVX-512 kernel:
// the rows, 32 at a time, are laid out as query lanes, and each block of
// centroids small enough to stay in L2 is run against every group of 32
// before the next block, each lane keeping its best centroid and the
// lowest id among equals (argmax8x32AVX512). The products are summed in
// dimension order, as the exact stage sums them; OpenBLAS's differ in the
// last bits, so a token almost equidistant from two centroids may go to
// the other one. About 2.5 times OpenBLAS's AVX2 speed
// (BenchmarkExactAssign).
func (a *exactAssigner) assignLanes(rows []float32, out []int32, s *laneScratch) error {
	dim := a.dim
	m := len(out)
	groups := (m + 31) / 32
	s.qt = slices.Grow(s.qt[:0], groups*32*dim)[:groups*32*dim]
	s.best = slices.Grow(s.best[:0], groups*32)[:groups*32]
	s.idx = slices.Grow(s.idx[:0], groups*32)[:groups*32]
	clear(s.qt)
	for i := range m {
		g, l := i/32, i%32
		qt := s.qt[g*32*dim : (g+1)*32*dim]
		for k, v := range rows[i*dim : (i+1)*dim] {
			qt[k*32+l] = v
		}
	}
	for i := range s.best {
		s.best[i], s.idx[i] = float32(math.Inf(-1)), -1
	}
	// Centroid blocks of about 256 KiB, a multiple of 8 rows.
	cb := max(8, (65536/dim)&^7)
	for c0 := 0; c0 < a.k; c0 += cb {
		nc := min(cb, a.k-c0)
		for g := range groups {
			argmaxRows(s.qt[g*32*dim:(g+1)*32*dim], a.cent[c0*dim:(c0+nc)*dim], dim, s.best[g*32:(g+1)*32], s.idx[g*32:(g+1)*32], c0, &s.pad)
		}
	}
	for i := range m {
		if s.idx[i] < 0 {
			return fmt.Errorf("row %d matched no centroid (not finite?)", i)
		}
		out[i] = s.idx[i]
	}
	return nil
}

// argmaxRows runs argmax8x32AVX512 for the 32 lanes at qt over rows (dim
// values each, any number of them), row j counting as base + j: the last
// rows short of a group of 8 are copied to pad, with copies of the last
// one after them, which equal their original and so never win.
func argmaxRows(qt, rows []float32, dim int, best []float32, idx []int32, base int, pad *[]float32) {
	n := len(rows) / dim
	full := n &^ 7
	if full > 0 {
		argmax8x32AVX512(&qt[0], &rows[0], full, dim, &best[0], &idx[0], base)
	}
	if tail := n - full; tail > 0 {
		*pad = slices.Grow((*pad)[:0], 8*dim)[:8*dim]
		for j := range 8 {
			src := full + min(j, tail-1)
			copy((*pad)[j*dim:(j+1)*dim], rows[src*dim:(src+1)*dim])
		}
		argmax8x32AVX512(&qt[0], &(*pad)[0], 8, dim, &best[0], &idx[0], base+full)
	}
}

// maxOf returns the largest value of v (-Inf for none; NaNs are passed
// over): with AVX2, 32 lanes at a time; else with eight independent maxima
// so that the loop is not one chain of dependent comparisons.
func maxOf(v []float32) float32 {
	inf := float32(math.Inf(-1))
	if n := len(v) &^ 31; useAVX2 && n > 0 {
		m := maxF32AVX2(&v[0], n)
		for _, x := range v[n:] {
			if x > m {
				m = x
			}
		}
		return m
	}
	m0, m1, m2, m3, m4, m5, m6, m7 := inf, inf, inf, inf, inf, inf, inf, inf
	i := 0
	for ; i+8 <= len(v); i += 8 {
		w := v[i : i+8 : i+8]
		if w[0] > m0 {
			m0 = w[0]
		}
		if w[1] > m1 {
			m1 = w[1]
		}
		if w[2] > m2 {
			m2 = w[2]
		}
		if w[3] > m3 {
			m3 = w[3]
		}
		if w[4] > m4 {
			m4 = w[4]
		}
		if w[5] > m5 {
			m5 = w[5]
		}
		if w[6] > m6 {
			m6 = w[6]
		}
		if w[7] > m7 {
			m7 = w[7]
		}
	}
	for ; i < len(v); i++ {
		if v[i] > m0 {
			m0 = v[i]
		}
	}
	for _, m := range [...]float32{m1, m2, m3, m4, m5, m6, m7} {
		if m > m0 {
			m0 = m
		}
	}
	return m0
}

// Close releases nothing native: the centroids are Go memory.
func (a *exactAssigner) Close() error { return nil }

// twoLevel assigns through groups of centroids; see above.
type twoLevel struct {
	dim    int
	probe  int
	coarse []float32 // ncoarse × dim
	// lanes, where the AVX-512 kernels run, holds the coarse centroids as
	// query lanes, 32 to a chunk (coarseScores).
	lanes []*queryLanes
	ids   [][]int32   // per group, the ids of its centroids
	rows  [][]float32 // per group, their rows, contiguous
	i8    []*centI8   // per group, its centroids in int8 (i8Assign)
	// coarseLanes and coarseScale are the coarse centroids in int8, laid
	// out as lanes 32 at a time, and their scales, when the groups are in
	// int8 (coarseScores8).
	coarseLanes []byte
	coarseScale []float32
}

func newTwoLevel(cent []float32, dim, probe int) (*twoLevel, error) {
	nlist := len(cent) / dim
	ncoarse := 1
	for ncoarse*ncoarse < nlist {
		ncoarse *= 2
	}
	// Grouped by this package's k-means with exact assignment, not
	// FAISS's: FAISS's OpenMP threads spin after each parallel region,
	// and with a grouping made at every k-means iteration that spinning
	// took 70 s of a SciFact build's 809 s of CPU, on cores the encoder
	// needed.
	coarse, err := exactKMeans(context.Background(), cent, dim, ncoarse, kmeansIterations, kmeansSeed)
	if err != nil {
		return nil, fmt.Errorf("two-level assignment: group %d centroids: %w", nlist, err)
	}
	scores := make([]float32, nlist*ncoarse)
	if err := blas.MulT(cent, nlist, coarse, ncoarse, dim, scores, ncoarse); err != nil {
		return nil, fmt.Errorf("two-level assignment: %w", err)
	}
	t := &twoLevel{dim: dim, probe: min(probe, ncoarse), coarse: coarse,
		ids: make([][]int32, ncoarse), rows: make([][]float32, ncoarse)}
	if useAVX512 && dim%8 == 0 && ncoarse%16 == 0 {
		for c := 0; c < ncoarse; c += 32 {
			t.lanes = append(t.lanes, newQueryLanes(coarse[c*dim:min(ncoarse, c+32)*dim], dim))
		}
	}
	for c := range nlist {
		row := scores[c*ncoarse : (c+1)*ncoarse]
		g := 0
		for j, v := range row {
			if v > row[g] {
				g = j
			}
		}
		t.ids[g] = append(t.ids[g], int32(c))
		t.rows[g] = append(t.rows[g], cent[c*dim:(c+1)*dim]...)
	}
	if i8Assign(dim) {
		t.i8 = make([]*centI8, ncoarse)
		for g, rows := range t.rows {
			if len(rows) > 0 {
				t.i8[g] = newCentI8(rows, dim)
			}
		}
		if useI8Coarse && ncoarse%32 == 0 && dim%8 == 0 {
			q8 := make([]byte, ncoarse*dim)
			if err := quantizeRowsI8(coarse, dim, q8); err != nil {
				return nil, fmt.Errorf("two-level assignment: coarse centroids: %w", err)
			}
			t.coarseLanes = make([]byte, ncoarse*dim)
			t.coarseScale = make([]float32, ncoarse)
			for c := 0; c < ncoarse; c += 32 {
				layLanes(t.coarseLanes[c*dim:(c+32)*dim], q8[c*dim:(c+32)*dim], dim)
			}
			for c := range ncoarse {
				t.coarseScale[c] = scaleI8(coarse[c*dim : (c+1)*dim])
			}
		}
	}
	return t, nil
}

// Assign compares each row with the coarse centroids, then, group by
// group, the rows probing a group with its centroids in one matrix
// product. Shares of the rows go to one goroutine per core.
func (t *twoLevel) Assign(rows []float32, out []int32) error {
	dim := t.dim
	if len(rows)%dim != 0 || len(out) != len(rows)/dim {
		return fmt.Errorf("two-level assignment: %d values and %d outputs for dimension %d", len(rows), len(out), dim)
	}
	n := len(out)
	parts := max(1, min(runtime.GOMAXPROCS(0), n/1024))
	errs := make([]error, parts)
	inParts(n, parts, func(p, from, to int) {
		errs[p] = t.assignRange(rows[from*dim:to*dim], out[from:to])
	})
	return errors.Join(errs...)
}

func (t *twoLevel) assignRange(rows []float32, out []int32) error {
	dim := t.dim
	ncoarse := len(t.ids)
	n := len(out)
	sc := twoLevelScratchPool.Get().(*twoLevelScratch)
	defer twoLevelScratchPool.Put(sc)
	sc.best = slices.Grow(sc.best[:0], n)[:n]
	best := sc.best
	for i := range best {
		best[i] = float32(math.Inf(-1))
		out[i] = -1
	}
	if len(sc.probers) < ncoarse {
		sc.probers = make([][]int32, ncoarse)
	}
	sc.order = slices.Grow(sc.order[:0], ncoarse)[:ncoarse]
	var (
		cs      = sc.cs
		order   = sc.order
		probers = sc.probers[:ncoarse]
		gather  = sc.gather
		scores  = sc.scores
	)
	defer func() { sc.cs, sc.gather, sc.scores = cs, gather, scores }()
	for from := 0; from < n; from += assignBatch {
		to := min(n, from+assignBatch)
		b := to - from
		cs = slices.Grow(cs[:0], (b+7)&^7*ncoarse)[:b*ncoarse]
		if t.i8 != nil {
			sc.q8 = slices.Grow(sc.q8[:0], b*dim)[:b*dim]
			if err := quantizeRowsI8(rows[from*dim:to*dim], dim, sc.q8); err != nil {
				return fmt.Errorf("two-level assignment: rows from %d: %w", from, err)
			}
		}
		if t.coarseLanes != nil {
			t.coarseScores8(sc, b, cs)
		} else if err := t.coarseScores(rows[from*dim:to*dim], b, cs); err != nil {
			return err
		}
		for g := range probers {
			probers[g] = probers[g][:0]
		}
		for i := range b {
			for _, g := range topGroups(cs[i*ncoarse:(i+1)*ncoarse], t.probe, order[:0]) {
				probers[g] = append(probers[g], int32(from+i))
			}
		}
		for g, ps := range probers {
			k := len(t.ids[g])
			if len(ps) == 0 || k == 0 {
				continue
			}
			if t.i8 != nil {
				// As below, in int8 (assign_i8.go).
				// The lanes past part's keep whatever they held: their
				// results are not read.
				sc.lanes8 = slices.Grow(sc.lanes8[:0], 32*dim)[:32*dim]
				t.inLanes(g, ps, best, out, func(part []int32, lb []float32, li []int32) {
					for l, i := range part {
						r := int(i) - from
						layLane(sc.lanes8, sc.q8[r*dim:(r+1)*dim], l)
					}
					t.i8[g].argmax(sc.lanes8, 0, k, lb, li, 0)
				})
				continue
			}
			if useAVX512 && useLaneAssign && dim%8 == 0 {
				// 32 probing rows at a time as lanes; within a group ids
				// ascend, so the kernel's lowest row is the lowest id.
				// BenchmarkAssign, two-level-8, AMD Zen 5: 16,384
				// centroids of 128 values 3.4 µs a token with BLAS, 2.1
				// with the kernel; 4,096 of 128, 2.0 and 1.4; 8,192 of
				// 384, 4.8 and 4.5.
				sc.qt = slices.Grow(sc.qt[:0], 32*dim)[:32*dim]
				t.inLanes(g, ps, best, out, func(part []int32, lb []float32, li []int32) {
					clear(sc.qt)
					for l, i := range part {
						for x, v := range rows[int(i)*dim : (int(i)+1)*dim] {
							sc.qt[x*32+l] = v
						}
					}
					argmaxRows(sc.qt, t.rows[g], dim, lb, li, 0, &sc.pad)
				})
				continue
			}
			gather = slices.Grow(gather[:0], len(ps)*dim)[:len(ps)*dim]
			for j, i := range ps {
				copy(gather[j*dim:(j+1)*dim], rows[int(i)*dim:(int(i)+1)*dim])
			}
			scores = slices.Grow(scores[:0], len(ps)*k)[:len(ps)*k]
			if err := blas.MulT(gather, len(ps), t.rows[g], k, dim, scores, k); err != nil {
				return fmt.Errorf("two-level assignment: %w", err)
			}
			for j, i := range ps {
				for c, v := range scores[j*k : (j+1)*k] {
					// Ties go to the lower id, as in exact search.
					if id := t.ids[g][c]; v > best[i] || (v == best[i] && id < out[i]) {
						best[i], out[i] = v, id
					}
				}
			}
		}
	}
	for i, c := range out {
		if c < 0 {
			return fmt.Errorf("two-level assignment: row %d matched no centroid (not finite?)", i)
		}
	}
	return nil
}

// inLanes runs the rows ps probing group g through a lane kernel, 32 at a
// time: run sets each lane l's best score in the group and the group's
// row that gave it (the lowest among equals; -1 for none) in lb and li for
// the rows part, which then raise best and out. Within a group ids ascend,
// so the lowest row is the lowest id.
func (t *twoLevel) inLanes(g int, ps []int32, best []float32, out []int32, run func(part []int32, lb []float32, li []int32)) {
	var lb [32]float32
	var li [32]int32
	for j0 := 0; j0 < len(ps); j0 += 32 {
		part := ps[j0:min(len(ps), j0+32)]
		for l := range lb {
			lb[l], li[l] = float32(math.Inf(-1)), -1
		}
		run(part, lb[:], li[:])
		for l, i := range part {
			if li[l] < 0 {
				continue
			}
			if v, id := lb[l], t.ids[g][li[l]]; v > best[i] || (v == best[i] && id < out[i]) {
				best[i], out[i] = v, id
			}
		}
	}
}

// coarseScores sets cs[i*ncoarse+g] to the inner product of row i of the
// b rows with coarse centroid g: with the AVX-512 kernels, each chunk of
// 32 coarse centroids as lanes against every row (about 2.5 times
// OpenBLAS's AVX2 speed), else one BLAS product.
func (t *twoLevel) coarseScores(rows []float32, b int, cs []float32) error {
	ncoarse := len(t.ids)
	if t.lanes == nil || !useLaneAssign {
		if err := blas.MulT(rows, b, t.coarse, ncoarse, t.dim, cs, ncoarse); err != nil {
			return fmt.Errorf("two-level assignment: %w", err)
		}
		return nil
	}
	for j, ql := range t.lanes {
		ql.dotInto(rows[:b*t.dim], cs[j*32:], ncoarse)
	}
	return nil
}

// useI8Coarse selects int8 coarse scores (coarseScores8) where the groups
// are in int8; tests turn it off to compare.
var useI8Coarse = true

// coarseScores8 is coarseScores in int8, for the b rows quantised at
// sc.q8: the coarse centroids are laid out as lanes, 32 at a time
// (newTwoLevel), and the rows, as signed int8 (signedRows), are scored
// against each 32 (dotI8x32VNNI) straight into the rows of cs. A row's
// scores leave out its scale, the same for every group, so they rank the
// groups as the float scores would, within the rounding to int8. On 128M
// synthetic tokens the float scores took 141 s of a 1,485 s build
// (README, "A million documents"); BenchmarkAssign, 32,768 centroids of
// 128 values, two-level-8: 1,106 ns a token in float32, 834 in int8.
// cs must have room for the rows past b up to a multiple of 8.
func (t *twoLevel) coarseScores8(sc *twoLevelScratch, b int, cs []float32) {
	dim, ncoarse := t.dim, len(t.ids)
	n := (b + 7) &^ 7 // the kernel's rows come in eights
	sc.s8 = slices.Grow(sc.s8[:0], n*dim)[:n*dim]
	sc.corr = slices.Grow(sc.corr[:0], n)[:n]
	sc.ones = slices.Grow(sc.ones[:0], n)[:n]
	signedRows(sc.q8[:b*dim], dim, sc.s8, sc.corr)
	clear(sc.s8[b*dim:])
	clear(sc.corr[b:])
	for i := range sc.ones {
		sc.ones[i] = 1
	}
	cs = cs[:n*ncoarse]
	for j := 0; j < ncoarse; j += 32 {
		dotI8x32VNNI(&t.coarseLanes[j*dim], &sc.s8[0], n, dim, &sc.corr[0], &sc.ones[0], &t.coarseScale[j], &cs[j], ncoarse)
	}
}

// signedRows sets s8 to the rows q (dim bytes each, from quantizeRowsI8:
// q8 + 128) as signed int8, and corr[i] to 128 times the sum of row i's
// values, as centI8 has them for dotI8x32VNNI. dim is a multiple of 8.
func signedRows(q []byte, dim int, s8 []byte, corr []int32) {
	const lo8, lo16 = 0x00ff00ff00ff00ff, 0x0000ffff0000ffff
	for i := range len(q) / dim {
		row, out := q[i*dim:(i+1)*dim], s8[i*dim:(i+1)*dim]
		var sum uint64
		for x := 0; x < dim; x += 8 {
			w := binary.LittleEndian.Uint64(row[x:])
			binary.LittleEndian.PutUint64(out[x:], w^0x8080808080808080)
			// The eight bytes' sum, in halves then quarters.
			a := w&lo8 + w>>8&lo8
			a = a&lo16 + a>>16&lo16
			sum += a&0xffffffff + a>>32
		}
		corr[i] = 128 * (int32(sum) - 128*int32(dim))
	}
}

// topGroups appends to out the indices of the k largest values of row,
// largest first, the lower index first among equal values: one pass that
// keeps the best k so far in order, where most values lose to the k-th
// at once. (A partial selection sort, k passes over the row, took 8
// passes of the coarse scores per token.)
//
// From 4k values on, that pass runs over the values at least a floor
// only: the least of the maxima of k slices of the row, which k values
// reach (one a slice), so none below it is among the k largest. The
// floor and the filter are branch-free passes; the insertions they save
// mispredicted (BenchmarkTopGroups: 8 of 128 in 0.94 µs with the pass
// over every value, 0.52 µs so).
func topGroups(row []float32, k int, out []int32) []int32 {
	k = min(k, len(row))
	if k <= 0 {
		return out
	}
	if useTopKAVX512 && len(row)%16 == 0 && len(row) >= 4*k && (len(row)/k)%16 == 0 {
		// All three steps in vectors: the candidates' ranks are counted,
		// not found by insertion.
		var cv [80]float32
		var ci [80]int32
		base := len(out)
		out = slices.Grow(out, k)[:base+k]
		if topKAVX512(&row[0], len(row), k, &out[base], &cv[0], &ci[0]) == k {
			return out
		}
		out = out[:base]
	}
	if len(row) >= 4*k && k <= topGroupsFilterMax {
		// The floor and the filter compare order keys, as integers,
		// which compile to conditional moves where floats branch.
		var at [topGroupsFilterMax]int32
		floor := int32(math.MaxInt32)
		per := len(row) / k
		for s := range k {
			m := orderKey(row[s*per])
			for _, v := range row[s*per+1 : (s+1)*per] {
				if x := orderKey(v); x > m {
					m = x
				}
			}
			if m < floor {
				floor = m
			}
		}
		// At most topGroupsFilterMax indices are kept, in row order; a
		// row with more values at the floor (ties) takes the full pass.
		n := 0
		for g, v := range row {
			at[n&(topGroupsFilterMax-1)] = int32(g)
			if orderKey(v) >= floor {
				n++
			}
			if n == topGroupsFilterMax {
				break
			}
		}
		if n < topGroupsFilterMax {
			return topOf(row, at[:n], k, out)
		}
	}
	return topOf(row, nil, k, out)
}

// topGroupsFilterMax bounds the values topGroups keeps past its floor (a
// power of two).
const topGroupsFilterMax = 64

// useTopKAVX512 selects topKAVX512 for topGroups where the CPU has
// AVX-512 (tests turn it off to compare).
var useTopKAVX512 = useAVX512

// orderKey maps a value that is not NaN to an int32 in the same order:
// its bits, with those of a negative value but the sign flipped. Both
// zeros map to 0, as they compare equal.
func orderKey(v float32) int32 {
	b := int32(math.Float32bits(v + 0)) // -0 + 0 is +0
	return b ^ (b >> 31 & math.MaxInt32)
}

// topOf is topGroups's pass over the values of row at the indices of at
// (in increasing order), or over all of row when at is nil.
func topOf(row []float32, at []int32, k int, out []int32) []int32 {
	base := len(out)
	n := len(row)
	if at != nil {
		n = len(at)
	}
	for i := range n {
		g := i
		if at != nil {
			g = int(at[i])
		}
		v := row[g]
		top := out[base:]
		if len(top) == k {
			if !(v > row[top[k-1]]) {
				continue
			}
			top = top[:k-1]
			out = out[:base+k-1]
		}
		// Insert g after every kept value that is at least v.
		j := len(top)
		for j > 0 && v > row[top[j-1]] {
			j--
		}
		out = append(out, 0)
		top = out[base:]
		copy(top[j+1:], top[j:len(top)-1])
		top[j] = int32(g)
	}
	return out
}

// Close releases nothing native: the groups are Go memory.
func (t *twoLevel) Close() error { return nil }

// twoLevelScratch is assignRange's working memory, kept between calls
// (twoLevelScratchPool): a build assigns each applied batch, and k-means
// each iteration, and allocating it anew for each was most of what a
// build allocated after the token rows.
type twoLevelScratch struct {
	best, cs, gather, scores []float32
	qt, pad                  []float32 // the lanes path (argmaxRows)
	q8, lanes8               []byte    // the int8 path (assign_i8.go)
	s8                       []byte    // coarseScores8's rows, signed
	corr                     []int32
	ones                     []float32
	order                    []int32
	probers                  [][]int32
}

var twoLevelScratchPool = sync.Pool{New: func() any { return new(twoLevelScratch) }}

// twoLevelKMeans is spherical k-means (Lloyd's iterations, centroids
// renormalised to unit length) whose assignment step is two-level: for k
// centroids of n points each iteration costs about n·(√k + probe·√k)
// inner products instead of n·k. It starts from k distinct points drawn
// with seed; a centroid left without points takes half of the largest
// cluster (a copy of its centroid, the two moved apart slightly), as
// FAISS's k-means does. It needs k ≤ n.
//
// The last twoLevelTrainExact iterations assign exactly, to correct what
// the two-level ones left.
func twoLevelKMeans(ctx context.Context, x []float32, dim, k, iters int, seed uint64) ([]float32, error) {
	it := 0
	return sphericalKMeans(ctx, x, dim, k, iters, seed, func(cent []float32) (assigner, error) {
		it++
		if it > iters-twoLevelTrainExact {
			return newExactAssigner(cent, dim)
		}
		return newTwoLevel(cent, dim, twoLevelTrainProbes)
	})
}

// exactKMeans is the same k-means with exact assignment (exactAssigner),
// on every core: FAISS's spherical k-means, whose assignment runs its
// products on one.
func exactKMeans(ctx context.Context, x []float32, dim, k, iters int, seed uint64) ([]float32, error) {
	return sphericalKMeans(ctx, x, dim, k, iters, seed, func(cent []float32) (assigner, error) {
		return newExactAssigner(cent, dim)
	})
}

// sphericalKMeans is Lloyd's k-means with centroids renormalised to unit
// length, each iteration's assignment by newAssigner; see twoLevelKMeans.
// It stops between iterations when ctx ends.
func sphericalKMeans(ctx context.Context, x []float32, dim, k, iters int, seed uint64, newAssigner func([]float32) (assigner, error)) ([]float32, error) {
	n := len(x) / dim
	if k <= 0 || k > n {
		return nil, fmt.Errorf("k-means: %d points for %d centroids", n, k)
	}
	r := rand.New(rand.NewPCG(seed, 0x6b6d))
	cent := make([]float32, k*dim)
	for c, i := range r.Perm(n)[:k] {
		copy(cent[c*dim:(c+1)*dim], x[i*dim:(i+1)*dim])
	}
	normalizeRows(cent, dim)
	assign := make([]int32, n)
	var lanes []byte // x in int8, for int8 assignment
	sums := make([]float64, k*dim)
	counts := make([]int, k)
	for it := range iters {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a, err := newAssigner(cent)
		if err != nil {
			return nil, fmt.Errorf("k-means, iteration %d: %w", it, err)
		}
		if ea, ok := a.(*exactAssigner); ok && ea.i8 != nil {
			// The points in int8, laid out once for every iteration.
			if lanes == nil {
				lanes = make([]byte, lanesLen(n, dim))
				if err := quantizeLanes(x, dim, lanes, make([]byte, 32*dim)); err != nil {
					return nil, fmt.Errorf("k-means: %w", err)
				}
			}
			err = ea.AssignLanes(lanes, assign)
		} else {
			err = a.Assign(x, assign)
		}
		a.Close()
		if err != nil {
			return nil, fmt.Errorf("k-means, iteration %d: %w", it, err)
		}
		clear(sums)
		clear(counts)
		for i, c := range assign {
			counts[c]++
			s := sums[int(c)*dim : int(c+1)*dim]
			for j, v := range x[i*dim : (i+1)*dim] {
				s[j] += float64(v)
			}
		}
		for c := range k {
			if counts[c] == 0 {
				continue
			}
			for j, s := range sums[c*dim : (c+1)*dim] {
				cent[c*dim+j] = float32(s / float64(counts[c]))
			}
		}
		// Empty centroids split the largest clusters.
		for c := range k {
			if counts[c] > 0 {
				continue
			}
			big := 0
			for j, m := range counts {
				if m > counts[big] {
					big = j
				}
			}
			for j := range dim {
				v := cent[big*dim+j]
				eps := float32(1e-3) * float32(r.NormFloat64())
				cent[c*dim+j], cent[big*dim+j] = v+eps, v-eps
			}
			counts[c] = counts[big] / 2
			counts[big] -= counts[c]
		}
		normalizeRows(cent, dim)
	}
	return cent, nil
}

// normalizeRows scales each row of dim values to unit length (a zero row
// stays zero).
func normalizeRows(v []float32, dim int) {
	for i := 0; i < len(v); i += dim {
		row := v[i : i+dim]
		var ss float64
		for _, x := range row {
			ss += float64(x) * float64(x)
		}
		if ss > 0 {
			inv := float32(1 / math.Sqrt(ss))
			for j := range row {
				row[j] *= inv
			}
		}
	}
}
