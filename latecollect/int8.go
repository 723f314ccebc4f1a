package latecollect

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// queryI8 is a query quantised for scoring I8 rows with integer
// arithmetic: each token i as int8 values q8 and a scale, q ≈ q8*scale[i],
// with scale = max|q|/127 as EncodeTokens gives an I8 row.
//
// A document row d ≈ d8*s (an I8 row) then scores
//
//	scale[i] * (s * float32(Σ_k q8[k]*d8[k]))
//
// with the integer sum exact and converted to float32 exactly (|sum| ≤
// 127*127*dim < 2^24 up to 1,040 dimensions), so the portable code and the
// VNNI and AVX2 kernels give the same bits (TestMaxSimI8Kernels). The maximum over
// rows is taken before the multiplication by scale[i], which is positive
// and so keeps it.
type queryI8 struct {
	nq, dim int
	q8      []int8
	scale   []float32
	// kernel is the kernel maxSim runs: i8VNNI, i8AVX2 or i8Go.
	kernel int
	// lanes holds the tokens for maxSimI8x32VNNI, 32 at a time (the last
	// chunk padded with zero tokens): chunk c at lanes[c*32*dim:], value
	// k of token l at (k/4)*128 + 4*l + k%4, as q8+128, an unsigned byte.
	// abs and sgn hold them so for maxSimI8x32AVX2, as |q8| and q8.
	lanes, abs, sgn []byte
}

// The kernels of queryI8.maxSim, and the rows each takes at a time.
const (
	i8Go = iota
	i8AVX2
	i8VNNI
)

var i8Tile = [...]int{i8Go: 1, i8AVX2: 2, i8VNNI: laneTile}

// newQueryI8 quantises the query tokens q of dim values.
func newQueryI8(q []float32, dim int) *queryI8 {
	nq := len(q) / dim
	qi := &queryI8{nq: nq, dim: dim, q8: make([]int8, nq*dim), scale: make([]float32, nq)}
	for i := range nq {
		row := q[i*dim : (i+1)*dim]
		s := scaleI8(row)
		qi.scale[i] = s
		for k, v := range row {
			qi.q8[i*dim+k] = quantizeI8(v, s)
		}
	}
	switch {
	case useVNNI && dim%64 == 0:
		qi.kernel = i8VNNI
		qi.lanes = qi.layout(128, false)
	case useAVX2 && dim%4 == 0:
		qi.kernel = i8AVX2
		qi.abs = qi.layout(0, true)
		qi.sgn = qi.layout(0, false)
	}
	return qi
}

// layout lays the tokens out for the kernels, 32 at a time, the last
// chunk padded with zero tokens: chunk c at [c*32*dim:], value k of token
// l at (k/4)*128 + 4*l + k%4, as the byte q8+bias (modulo 256), or
// |q8|+bias when abs is set.
func (qi *queryI8) layout(bias byte, abs bool) []byte {
	dim := qi.dim
	out := make([]byte, (qi.nq+31)/32*32*dim)
	if bias != 0 {
		for i := range out {
			out[i] = bias // the padding's zero tokens
		}
	}
	for i := range qi.nq {
		base := (i/32)*32*dim + 4*(i%32)
		for k, v := range qi.q8[i*dim : (i+1)*dim] {
			if abs && v < 0 {
				v = -v
			}
			out[base+(k/4)*128+k%4] = byte(v) + bias
		}
	}
	return out
}

// run raises cb[l], l < 32, over rows rows (a multiple of the kernel's
// tile) at d, stride bytes apart (0: one row, repeated), for chunk c of
// the query tokens, with the assembly kernel.
func (qi *queryI8) run(c int, d *byte, stride, rows int, cb *[32]float32) {
	dim := qi.dim
	switch qi.kernel {
	case i8VNNI:
		qt := &qi.lanes[c*dim]
		for t := 0; t < rows; t += laneTile {
			maxSimI8x32VNNI(qt, (*byte)(unsafe.Add(unsafe.Pointer(d), t*stride)), stride, dim, &cb[0])
		}
	case i8AVX2:
		maxSimI8x32AVX2(&qi.abs[c*dim], &qi.sgn[c*dim], d, stride, dim, rows, &cb[0])
	}
}

// maxSim sets best[i], i < nq, to the largest inner product of query
// token i with one of the n I8 rows at rows (a float32 scale, then dim
// int8 values each, as in an I8 blob), or to -Inf when n is 0. pad is
// scratch the kernel may use for a last partial tile; maxSim returns it,
// grown if it was too small.
func (qi *queryI8) maxSim(rows []byte, n int, best []float32, pad []byte) []byte {
	fillInf(best)
	if n == 0 {
		return pad
	}
	stride := 4 + qi.dim
	rows = rows[:n*stride]
	if qi.kernel == i8Go {
		maxSimI8Go(qi, rows, n, best)
	} else {
		pad = qi.maxSimTiles(rows, n, best, pad)
	}
	for i := range best {
		best[i] *= qi.scale[i]
	}
	return pad
}

// argmax sets best as maxSim does and row[i] to the row whose product
// gave best[i], the first among equals (-1 when n is 0), computing each
// product as maxSim does: with the kernel given one row as all of its
// tile (stride 0), or with the portable code.
func (qi *queryI8) argmax(rows []byte, n int, best []float32, row []int) {
	fillInf(best)
	for i := range row {
		row[i] = -1
	}
	stride := 4 + qi.dim
	dots := make([]float32, qi.nq)
	var cb [32]float32
	for j := range n {
		r := rows[j*stride : (j+1)*stride]
		if qi.kernel != i8Go {
			for c := 0; c < qi.nq; c += 32 {
				for i := range cb {
					cb[i] = float32(math.Inf(-1))
				}
				qi.run(c, &r[4], 0, i8Tile[qi.kernel], &cb)
				copy(dots[c:min(c+32, qi.nq)], cb[:])
			}
		} else {
			fillInf(dots)
			maxSimI8Go(qi, r, 1, dots)
		}
		for i, v := range dots {
			if v > best[i] {
				best[i], row[i] = v, j
			}
		}
	}
	for i := range best {
		best[i] *= qi.scale[i]
	}
}

// maxSimTiles is maxSim's assembly path, before the query scales: the
// rows a tile at a time, the last rows, fewer than a tile, copied to pad
// with the last one repeated (which changes no maximum).
func (qi *queryI8) maxSimTiles(rows []byte, n int, best []float32, pad []byte) []byte {
	stride := 4 + qi.dim
	tile := i8Tile[qi.kernel]
	full := n - n%tile
	if full < n {
		pad = padTile(pad, rows, full, n, tile, stride)
	}
	var cb [32]float32
	for c := 0; c < qi.nq; c += 32 {
		for i := range cb {
			cb[i] = float32(math.Inf(-1))
		}
		if full > 0 {
			qi.run(c, &rows[4], stride, full, &cb)
		}
		if full < n {
			qi.run(c, &pad[4], stride, tile, &cb)
		}
		copy(best[c:min(c+32, qi.nq)], cb[:])
	}
	return pad
}

// maxSimI8Go is the portable maxSimTiles: best[i] is raised to s_j *
// float32(Σ_k q8[k]*d8[k]) for each row j, before the query scales. Four
// query tokens are taken at a time, so that each loaded value of the row
// serves four products.
func maxSimI8Go(qi *queryI8, rows []byte, n int, best []float32) {
	dim, stride := qi.dim, 4+qi.dim
	for j := range n {
		row := rows[j*stride : (j+1)*stride]
		s := math.Float32frombits(binary.LittleEndian.Uint32(row))
		d := row[4 : 4+dim]
		i := 0
		for ; i+4 <= qi.nq; i += 4 {
			q0 := qi.q8[i*dim : (i+1)*dim][:len(d)]
			q1 := qi.q8[(i+1)*dim : (i+2)*dim][:len(d)]
			q2 := qi.q8[(i+2)*dim : (i+3)*dim][:len(d)]
			q3 := qi.q8[(i+3)*dim : (i+4)*dim][:len(d)]
			var a0, a1, a2, a3 int32
			for k, b := range d {
				x := int32(int8(b))
				a0 += int32(q0[k]) * x
				a1 += int32(q1[k]) * x
				a2 += int32(q2[k]) * x
				a3 += int32(q3[k]) * x
			}
			best[i] = max(best[i], s*float32(a0))
			best[i+1] = max(best[i+1], s*float32(a1))
			best[i+2] = max(best[i+2], s*float32(a2))
			best[i+3] = max(best[i+3], s*float32(a3))
		}
		for ; i < qi.nq; i++ {
			q := qi.q8[i*dim : (i+1)*dim][:len(d)]
			var a int32
			for k, b := range d {
				a += int32(q[k]) * int32(int8(b))
			}
			best[i] = max(best[i], s*float32(a))
		}
	}
}
