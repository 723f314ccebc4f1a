package latecollect

import (
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// Assignment in int8 (argmaxI8x32VNNI). On CPUs with AVX-512 VNNI, the
// assigners compare tokens with centroids as int8 vectors: each centroid
// and each token quantised with a scale of its own (scaleI8, as an I8
// blob scales a token; quantizeRowsI8), the inner product summed exactly in
// integers, and the centroid's score for a token scale_c *
// float32(<q8, c8>) (the token's scale, the same for every centroid, is
// left out). VPDPBUSD makes 64 int8 products an instruction where the
// float kernel (argmax8x32AVX512) makes 16, and the tokens of an I8 blob
// are int8 already.
//
// A token goes to the centroid with the best int8 score, the lowest id
// among equal ones: the nearest centroid, or one whose float score is
// within the quantisation's error of the nearest one, which only makes
// its residual (taken from the float centroid) a little larger.
// TestI8AssignerAgrees measures how often and by how much. Elsewhere the
// float kernels assign (argmax8x32AVX512, or OpenBLAS's products), and
// argmaxI8Go is the portable twin the tests hold the kernel to.

// useI8Assign turns int8 assignment off, for tests that hold the float
// kernels to each other (withoutI8Assign) and for benchmarks.
var useI8Assign = true

// i8Assign reports whether assignment runs in int8 for dimension dim.
func i8Assign(dim int) bool { return useI8Assign && useVNNI && dim%4 == 0 && dim <= 1040 }

// centI8 is a set of centroids quantised for argmaxI8x32VNNI: k rows of
// dim int8 values, padded to a multiple of 8 with copies of the last one
// (which equal it, come after it, and so never win), each with its scale
// and corr = 128 * Σ c8[k].
type centI8 struct {
	dim, k int
	c8     []byte
	corr   []int32
	scale  []float32
}

func newCentI8(cent []float32, dim int) *centI8 {
	k := len(cent) / dim
	kp := (k + 7) &^ 7
	c := &centI8{dim: dim, k: k, c8: make([]byte, kp*dim), corr: make([]int32, kp), scale: make([]float32, kp)}
	for j := range kp {
		row := cent[min(j, k-1)*dim : (min(j, k-1)+1)*dim]
		s := scaleI8(row)
		var sum int32
		for x, v := range row {
			q := quantizeI8(v, s)
			c.c8[j*dim+x] = byte(q)
			sum += int32(q)
		}
		c.scale[j], c.corr[j] = s, 128*sum
	}
	return c
}

// argmax raises best[l] and sets idx[l] (as argmaxI8x32VNNI) over the
// centroids from..to, to a multiple of 8 or c.k (the padding makes up the
// last 8), numbered base + j for centroid j, for the 32 tokens at lanes.
func (c *centI8) argmax(lanes []byte, from, to int, best []float32, idx []int32, base int) {
	if to == c.k {
		to = (to + 7) &^ 7
	}
	if to <= from {
		return
	}
	argmaxI8x32VNNI(&lanes[0], &c.c8[from*c.dim], to-from, c.dim, &c.corr[from], &c.scale[from], &best[0], &idx[0], base+from)
}

// quantizeRowsI8 sets dst (n × dim bytes) to the rows quantised as the
// lanes hold them, q8 + 128: each row with the scale an I8 blob gives it
// (scaleI8), each value v/scale rounded to the nearest integer (half to
// even, where quantizeI8 rounds half away from zero: assignment needs no
// more), or reports the first row that is not finite. It is a large share
// of coding's cost, so it rounds in float32 without branches: adding
// 1.5·2^23 leaves the rounded value in the low mantissa bits.
func quantizeRowsI8(rows []float32, dim int, dst []byte) error {
	const magic = 1 << 23 * 1.5
	for i := 0; i < len(rows)/dim; i++ {
		row := rows[i*dim : (i+1)*dim]
		// The largest |v| by its bits (positive floats order as their
		// bits do); an infinity or a NaN has all exponent bits set.
		var mb uint32
		for _, v := range row {
			if b := math.Float32bits(v) &^ (1 << 31); b > mb {
				mb = b
			}
		}
		if mb >= 0x7f800000 {
			return fmt.Errorf("row %d is not finite", i)
		}
		out := dst[i*dim : (i+1)*dim]
		s := roundScaleI8(math.Float32frombits(mb))
		if s == 0 {
			for x := range out {
				out[x] = 128
			}
			continue
		}
		inv := 1 / s
		for x, v := range row {
			y := float32(v*inv) + magic
			q := int32(math.Float32bits(y)) - 0x4b400000
			if q > 127 {
				q = 127
			} else if q < -127 {
				q = -127
			}
			out[x] = byte(q + 128)
		}
	}
	return nil
}

// layLanes lays the quantised rows q (dim bytes each, from
// quantizeRowsI8, at most 32) out at lanes as queryI8.lanes does, row l
// of q in lane l, the lanes past len(q)/dim zero tokens (128).
func layLanes(lanes, q []byte, dim int) {
	n := len(q) / dim
	if n < 32 {
		for i := range lanes {
			lanes[i] = 128
		}
	}
	if n > 32 {
		panic("latecollect: layLanes: more than 32 rows")
	}
	for l := range n {
		layLane(lanes, q[l*dim:(l+1)*dim], l)
	}
}

// layLane lays the quantised row q out as lane l (< 32) of lanes, four
// bytes at a time and without bounds checks (the shape is checked first):
// two-level assignment lays each token out once per group it probes.
func layLane(lanes, q []byte, l int) {
	dim := len(q)
	if l < 0 || l >= 32 || dim%4 != 0 || len(lanes) < 32*dim {
		panic("latecollect: layLane: bad shape")
	}
	src, dst := unsafe.Pointer(unsafe.SliceData(q)), unsafe.Pointer(&lanes[4*l])
	for k := 0; k < dim; k += 4 {
		*(*uint32)(unsafe.Add(dst, k*32)) = *(*uint32)(unsafe.Add(src, k))
	}
}

// quantizeLanes quantises rows (quantizeRowsI8) into lanes, 32 at a time
// (32·dim bytes each, the last padded with zero tokens), using q (32·dim
// bytes) as scratch.
func quantizeLanes(rows []float32, dim int, lanes, q []byte) error {
	n := len(rows) / dim
	for g := 0; g*32 < n; g++ {
		m := min(32, n-g*32)
		if err := quantizeRowsI8(rows[g*32*dim:(g*32+m)*dim], dim, q[:m*dim]); err != nil {
			return fmt.Errorf("rows from %d: %w", g*32, err)
		}
		layLanes(lanes[g*32*dim:(g+1)*32*dim], q[:m*dim], dim)
	}
	return nil
}

// lanesLen is the size of n rows of dim values laid out as lanes.
func lanesLen(n, dim int) int { return (n + 31) / 32 * 32 * dim }

// assignI8 is Assign over one chunk of rows with int8 centroids.
func (a *exactAssigner) assignI8(rows []float32, out []int32, s *laneScratch) error {
	dim := a.dim
	s.lanes8 = slices.Grow(s.lanes8[:0], lanesLen(len(out), dim))[:lanesLen(len(out), dim)]
	s.q8 = slices.Grow(s.q8[:0], 32*dim)[:32*dim]
	if err := quantizeLanes(rows, dim, s.lanes8, s.q8); err != nil {
		return err
	}
	return a.assignLanes8(s.lanes8, out, s)
}

// assignLanes8 is assignI8 over rows quantised and laid out already
// (quantizeLanes): each block of centroids small enough to stay in L2 is
// run against every group of 32 rows before the next block.
func (a *exactAssigner) assignLanes8(lanes []byte, out []int32, s *laneScratch) error {
	dim := a.dim
	m := len(out)
	groups := (m + 31) / 32
	s.best = slices.Grow(s.best[:0], groups*32)[:groups*32]
	s.idx = slices.Grow(s.idx[:0], groups*32)[:groups*32]
	for i := range s.best {
		s.best[i], s.idx[i] = float32(math.Inf(-1)), -1
	}
	// Centroid blocks of about 256 KiB, a multiple of 8 rows.
	cb := max(8, (262144/dim)&^7)
	for c0 := 0; c0 < a.k; c0 += cb {
		c1 := min(c0+cb, a.k)
		for g := range groups {
			a.i8.argmax(lanes[g*32*dim:(g+1)*32*dim], c0, c1, s.best[g*32:(g+1)*32], s.idx[g*32:(g+1)*32], 0)
		}
	}
	for i := range m {
		if s.idx[i] < 0 {
			return fmt.Errorf("row %d matched no centroid", i)
		}
		out[i] = s.idx[i]
	}
	return nil
}

// AssignLanes is Assign over rows quantised and laid out already
// (quantizeLanes), for an assigner in int8 (a.i8 set): k-means lays its
// points out once for all its iterations.
func (a *exactAssigner) AssignLanes(lanes []byte, out []int32) error {
	dim := a.dim
	if a.i8 == nil || len(lanes) != lanesLen(len(out), dim) {
		return fmt.Errorf("exact assignment: %d bytes of lanes for %d rows of dimension %d", len(lanes), len(out), dim)
	}
	// The chunks are whole groups of 32 (exactChunks).
	return a.inChunks(len(out), func(from, to int, s *laneScratch) error {
		return a.assignLanes8(lanes[from*dim:from*dim+lanesLen(to-from, dim)], out[from:to], s)
	})
}

// scores sets rows from..to (a multiple of 8 or c.k) of out, a table of
// the given stride (16 or 32), to the centroids' scores for the 32 query
// tokens at lanes (queryI8.lanes), each with its scale qscale[l] (32 of
// them, zero for a padding lane): float32(<q_l, c8_j>) * scale[j] *
// qscale[l] (dotI8x32VNNI). Past c.k, the padding rows are written too:
// out must have room for them.
func (c *centI8) scores(lanes []byte, qscale []float32, from, to int, out []float32, stride int) {
	if to == c.k {
		to = (to + 7) &^ 7
	}
	if to <= from {
		return
	}
	dotI8x32VNNI(&lanes[0], &c.c8[from*c.dim], to-from, c.dim, &c.corr[from], &c.scale[from], &qscale[0], &out[from*stride], stride)
}
