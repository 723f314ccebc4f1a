package latecollect

import (
	"encoding/binary"
	"math"
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
// VNNI kernel give the same bits (TestMaxSimI8Kernels). The maximum over
// rows is taken before the multiplication by scale[i], which is positive
// and so keeps it.
type queryI8 struct {
	nq, dim int
	q8      []int8
	scale   []float32
	// lanes holds the tokens for maxSimI8x32VNNI, 32 at a time (the last
	// chunk padded with zero tokens), or nil without the kernel: chunk c
	// at lanes[c*32*dim:], value k of token l at (k/4)*128 + 4*l + k%4, as
	// q8+128, an unsigned byte.
	lanes []byte
}

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
	if useVNNI && dim%64 == 0 {
		chunks := (nq + 31) / 32
		qi.lanes = make([]byte, chunks*32*dim)
		for c := range chunks {
			lanes := qi.lanes[c*32*dim : (c+1)*32*dim]
			for l := range 32 {
				i := c*32 + l
				for k := range dim {
					var v int8
					if i < nq {
						v = qi.q8[i*dim+k]
					}
					lanes[(k/4)*128+4*l+k%4] = byte(int(v) + 128)
				}
			}
		}
	}
	return qi
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
	if qi.lanes == nil {
		maxSimI8Go(qi, rows, n, best)
	} else {
		pad = qi.maxSimVNNI(rows, n, best, pad)
	}
	for i := range best {
		best[i] *= qi.scale[i]
	}
	return pad
}

// argmax sets best as maxSim does and row[i] to the row whose product
// gave best[i], the first among equals (-1 when n is 0), computing each
// product as maxSim does: with the VNNI kernel given one row as all 8 of
// its tile (stride 0), or with the portable code.
func (qi *queryI8) argmax(rows []byte, n int, best []float32, row []int) {
	fillInf(best)
	for i := range row {
		row[i] = -1
	}
	dim, stride := qi.dim, 4+qi.dim
	dots := make([]float32, qi.nq)
	var cb [32]float32
	for j := range n {
		r := rows[j*stride : (j+1)*stride]
		if qi.lanes != nil {
			for c := 0; c < qi.nq; c += 32 {
				for i := range cb {
					cb[i] = float32(math.Inf(-1))
				}
				maxSimI8x32VNNI(&qi.lanes[c*dim], &r[4], 0, dim, &cb[0])
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

// maxSimVNNI is maxSim's kernel path, before the query scales: 8 rows at
// a time, the last rows, fewer than 8, copied to pad with the last one
// repeated (which changes no maximum).
func (qi *queryI8) maxSimVNNI(rows []byte, n int, best []float32, pad []byte) []byte {
	dim, stride := qi.dim, 4+qi.dim
	full := n - n%laneTile
	if full < n && len(pad) < laneTile*stride {
		pad = make([]byte, laneTile*stride)
	}
	if full < n {
		for j := range laneTile {
			src := min(full+j, n-1)
			copy(pad[j*stride:(j+1)*stride], rows[src*stride:(src+1)*stride])
		}
	}
	var cb [32]float32
	for c := 0; c < qi.nq; c += 32 {
		m := min(32, qi.nq-c)
		for i := range cb {
			cb[i] = float32(math.Inf(-1))
		}
		qt := &qi.lanes[c*dim]
		for t := 0; t < full; t += laneTile {
			maxSimI8x32VNNI(qt, &rows[t*stride+4], stride, dim, &cb[0])
		}
		if full < n {
			maxSimI8x32VNNI(qt, &pad[4], stride, dim, &cb[0])
		}
		copy(best[c:c+m], cb[:m])
	}
	return pad
}

// maxSimI8Go is the portable maxSimVNNI: best[i] is raised to s_j *
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
