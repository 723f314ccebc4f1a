package latecollect

import (
	"fmt"
	"math"
	"sync"
)

// Scoring names how a document's token similarities become one score.
type Scoring string

const (
	// ScoreAvgMax is ReAtt's score: for each query token the maximum inner
	// product over the document's tokens, averaged over query tokens. For
	// unit-length tokens it lies in [-1, 1] whatever the query length,
	// which is what score-based fusion needs.
	ScoreAvgMax Scoring = "avg-max"
	// ScoreSumMax is ColBERT's sum of MaxSim: the same maxima, summed.
	// For one query it ranks exactly like avg-max (the two differ by the
	// constant factor of the query's token count); only the scale differs.
	ScoreSumMax Scoring = "sum-max"
)

func (s Scoring) valid() bool { return s == ScoreAvgMax || s == ScoreSumMax }

// AvgMax returns ReAtt's avg-max score of a document for a query. q and d
// hold token vectors of dim values row after row. qmask and dmask, when
// not nil, mark the tokens that count (padding and masked tokens are
// false); they must then have one entry per row.
//
// A query token whose document side has no token that counts contributes
// 0, and a query with no token that counts scores 0: a document shorter
// than the query (even empty) is scored, never rejected.
func AvgMax(q, d []float32, dim int, qmask, dmask []bool) (float32, error) {
	sum, n, err := maxSimChecked(q, d, dim, qmask, dmask)
	if err != nil || n == 0 {
		return 0, err
	}
	return sum / float32(n), nil
}

// SumMax returns ColBERT's sum-of-MaxSim score, with the same arguments
// and conventions as AvgMax.
func SumMax(q, d []float32, dim int, qmask, dmask []bool) (float32, error) {
	sum, _, err := maxSimChecked(q, d, dim, qmask, dmask)
	return sum, err
}

// maxSimChecked validates its arguments, then returns the sum over
// counted query tokens of their best similarity, and how many counted.
func maxSimChecked(q, d []float32, dim int, qmask, dmask []bool) (float32, int, error) {
	if dim <= 0 {
		return 0, 0, fmt.Errorf("%w: dimension %d", ErrBadVector, dim)
	}
	if len(q)%dim != 0 {
		return 0, 0, fmt.Errorf("%w: query has %d values, not a multiple of dimension %d", ErrBadVector, len(q), dim)
	}
	if len(d)%dim != 0 {
		return 0, 0, fmt.Errorf("%w: document has %d values, not a multiple of dimension %d", ErrBadVector, len(d), dim)
	}
	nq, nd := len(q)/dim, len(d)/dim
	if qmask != nil && len(qmask) != nq {
		return 0, 0, fmt.Errorf("%w: query mask has %d entries for %d tokens", ErrBadVector, len(qmask), nq)
	}
	if dmask != nil && len(dmask) != nd {
		return 0, 0, fmt.Errorf("%w: document mask has %d entries for %d tokens", ErrBadVector, len(dmask), nd)
	}
	best := make([]float32, nq)
	maxSim(q, d, dim, dmask, best)
	var sum float32
	n := 0
	for i, b := range best {
		if qmask != nil && !qmask[i] {
			continue
		}
		n++
		if !math.IsInf(float64(b), -1) {
			sum += b
		}
	}
	return sum, n, nil
}

// maxSim sets best[i] to the largest inner product of query token i with a
// counted document token, or -Inf when none counts. len(best) is the
// number of query tokens.
//
// On amd64, when dim is a multiple of 8, the products come from an
// assembly kernel: with AVX-512, query tokens in lanes and each product
// one fused multiply-add per value in order (queryLanes.maxSimInto); else,
// with AVX2 and FMA, four query tokens against two document tokens, each
// product summed in 8 lanes (maxSimAVX2); elsewhere from portable Go
// (maxSimGo). They sum in different orders, so their results may differ
// in the last bits (relative 1e-6 for 384-d unit vectors) from one CPU to
// another; each is deterministic, and every search of a process uses the
// same one, so a candidate's score equals its exhaustive score exactly.
func maxSim(q, d []float32, dim int, dmask []bool, best []float32) {
	fillInf(best)
	maxSimInto(q, d, dim, dmask, best)
}

// maxSimInto raises best[i] to the largest inner product of query token i
// with a counted document token, so that a document can be scored a block
// of tokens at a time (maxSimBlob).
func maxSimInto(q, d []float32, dim int, dmask []bool, best []float32) {
	if useAVX512 && dim%8 == 0 {
		if dmask != nil {
			// The counted rows, contiguous: each product is then
			// computed as without a mask.
			var rows []float32
			for j, c := range dmask {
				if c {
					rows = append(rows, d[j*dim:(j+1)*dim]...)
				}
			}
			d = rows
		}
		newQueryLanes(q[:len(best)*dim], dim).maxSimInto(d, best, nil)
		return
	}
	if useAVX2 && dim%8 == 0 {
		maxSimAVX2(q, d, dim, dmask, best)
		return
	}
	maxSimGo(q, d, dim, dmask, best)
}

// exactBlockBytes bounds the float32 rows maxSimBlob decodes at a time:
// 16 rows of 384 dimensions, which stay in a first-level cache while
// every query token passes over them, and a worker's buffer stays this
// small whatever the document's length (a whole 327-token document
// decoded is half a megabyte).
const exactBlockBytes = 24 << 10

// maxSimBlob sets best as maxSim does for the tokens of a checked blob,
// decoding them a block at a time into buf, which it returns (grown if
// it was too small) for the next call.
//
// ql is q laid out for the AVX-512 kernel (newQueryLanes), made once per
// search, or nil (then maxSimInto lays q out at every block).
func maxSimBlob(q []float32, ql *queryLanes, blob []byte, h blobHeader, best, buf []float32) []float32 {
	dim := h.dim
	rows := max(1, exactBlockBytes/(4*dim))
	// The block, then room for a padded last tile (queryLanes.maxSimInto).
	if cap(buf) < (rows+laneTile)*dim {
		buf = make([]float32, (rows+laneTile)*dim)
	}
	buf = buf[:cap(buf)]
	fillInf(best)
	for from := 0; from < h.count; from += rows {
		to := min(h.count, from+rows)
		block := buf[:(to-from)*dim]
		decodeRows(blob, h, from, to, block)
		if ql != nil {
			ql.maxSimInto(block, best, buf[rows*dim:])
		} else {
			maxSimInto(q, block, dim, nil, best)
		}
	}
	return buf
}

// exactKernels is a query made ready, once per search, for the kernels
// that score stored blobs exactly (scoreBlob): laid out for the AVX-512
// float kernels (ql, nil where they are not used), and quantised for I8
// blobs the first time one is scored (i8), unless the search is in
// Reference mode, which scores I8 blobs in float32. It is safe for
// concurrent use by a search's workers.
type exactKernels struct {
	q        []float32
	dim      int
	ql       *queryLanes
	quantise bool
	once     sync.Once
	qi       *queryI8
}

// newExactKernels prepares query (tokens of dim values, laid out as ql,
// which may be nil) for a search in mode.
func newExactKernels(query []float32, dim int, ql *queryLanes, mode Mode) *exactKernels {
	return &exactKernels{q: query, dim: dim, ql: ql, quantise: mode != Reference}
}

// i8 is the query quantised for I8 blobs, made at the first call, or nil
// in Reference mode.
func (k *exactKernels) i8() *queryI8 {
	if !k.quantise {
		return nil
	}
	k.once.Do(func() { k.qi = newQueryI8(k.q, k.dim) })
	return k.qi
}

// blobScratch is one worker's buffers for scoreBlob.
type blobScratch struct {
	rows []float32 // maxSimBlob's block of decoded rows
	pad  []byte    // queryI8.maxSim's padded last tile
}

// scoreBlob sets best[i] to query token i's largest inner product with a
// token of a checked blob: in int8 (queryI8.maxSim) for an I8 blob when k
// has the quantised query, otherwise in float32 over the decoded rows
// (maxSimBlob). Every exact score of a search comes from it.
func scoreBlob(k *exactKernels, blob []byte, h blobHeader, best []float32, s *blobScratch) {
	if h.enc == I8 && k.quantise {
		s.pad = k.i8().maxSim(blob[headerSize:], h.count, best, s.pad)
		return
	}
	s.rows = maxSimBlob(k.q, k.ql, blob, h, best, s.rows)
}

// laneTile is the number of document rows the AVX-512 kernels take at a
// time.
const laneTile = 8

// queryLanes is a query laid out for the AVX-512 kernels
// (maxSim8x32AVX512): its tokens in chunks of 32 (a last chunk of at most
// 16 in 16), each chunk's values k-major (value k of its tokens side by
// side), padded with zeros.
type queryLanes struct {
	nq, dim int
	qt      []float32
}

// newQueryLanes lays out the query tokens q of dim values, or returns nil
// where the kernels are not used (no AVX-512, or dim not a multiple of 8).
func newQueryLanes(q []float32, dim int) *queryLanes {
	if !useAVX512 || dim <= 0 || dim%8 != 0 {
		return nil
	}
	nq := len(q) / dim
	ql := &queryLanes{nq: nq, dim: dim}
	for c := 0; c < nq; c += 32 {
		lanes := chunkLanes(nq - c)
		off := len(ql.qt)
		ql.qt = append(ql.qt, make([]float32, dim*lanes)...)
		qt := ql.qt[off:]
		for l := range min(lanes, nq-c) {
			row := q[(c+l)*dim : (c+l+1)*dim]
			for k, v := range row {
				qt[k*lanes+l] = v
			}
		}
	}
	return ql
}

// chunkLanes is the width of a chunk of query tokens of which left remain.
func chunkLanes(left int) int {
	if left <= 16 {
		return 16
	}
	return 32
}

// maxSimInto raises best[i], i < nq, to the largest inner product of query
// token i with a row of d (rows of dim values). pad holds at least
// laneTile rows: the last rows, fewer than a tile, are copied there with
// the last one repeated (which changes no maximum). Each product is
// summed in the order of its values, whatever tile it falls in.
func (ql *queryLanes) maxSimInto(d, best, pad []float32) {
	dim := ql.dim
	nd := len(d) / dim
	if nd == 0 {
		return
	}
	full := nd - nd%laneTile
	if full < nd {
		pad = padTile(pad, d, full, nd, laneTile, dim)
	}
	var cb [32]float32
	off := 0
	for c := 0; c < ql.nq; c += 32 {
		lanes := chunkLanes(ql.nq - c)
		n := min(lanes, ql.nq-c)
		copy(cb[:n], best[c:c+n])
		for i := n; i < lanes; i++ {
			cb[i] = float32(math.Inf(-1))
		}
		qt := &ql.qt[off]
		kernel := maxSim8x32AVX512
		if lanes == 16 {
			kernel = maxSim8x16AVX512
		}
		for t := 0; t < full; t += laneTile {
			kernel(qt, &d[t*dim], dim, dim, &cb[0])
		}
		if full < nd {
			kernel(qt, &pad[0], dim, dim, &cb[0])
		}
		copy(best[c:c+n], cb[:n])
		off += dim * lanes
	}
}

// padTile copies rows full to n of rows (stride values each) to pad, the
// last one repeated up to tile rows (which changes no maximum), and
// returns pad, grown if it was too small: the last, partial tile of a
// kernel that takes tile rows at a time.
func padTile[T float32 | byte](pad, rows []T, full, n, tile, stride int) []T {
	if len(pad) < tile*stride {
		pad = make([]T, tile*stride)
	}
	for j := range tile {
		src := min(full+j, n-1)
		copy(pad[j*stride:(j+1)*stride], rows[src*stride:(src+1)*stride])
	}
	return pad
}

// dotInto sets out[i*ldo+l] to the inner product of row i of d (rows of
// dim values) with query token l, for every row and l < lanes, where the
// query is one chunk of lanes (16 or 32) tokens: ql.nq ≤ 32 and lanes =
// chunkLanes(ql.nq). The lanes past ql.nq hold zeros. Each product is
// summed as maxSimInto sums it.
func (ql *queryLanes) dotInto(d []float32, out []float32, ldo int) {
	dim, lanes := ql.dim, chunkLanes(ql.nq)
	nd := len(d) / dim
	kernel := dot8x32AVX512
	if lanes == 16 {
		kernel = dot8x16AVX512
	}
	full := nd - nd%laneTile
	if full > 0 && (len(out) < (full-1)*ldo+lanes || ldo < lanes) {
		panic("latecollect: dotInto: out too small")
	}
	for t := 0; t < full; t += laneTile {
		kernel(&ql.qt[0], &d[t*dim], dim, dim, &out[t*ldo], ldo)
	}
	if full < nd {
		pad := make([]float32, laneTile*dim)
		copy(pad, d[full*dim:nd*dim])
		tmp := make([]float32, laneTile*lanes)
		kernel(&ql.qt[0], &pad[0], dim, dim, &tmp[0], lanes)
		for j := range nd - full {
			copy(out[(full+j)*ldo:(full+j)*ldo+lanes], tmp[j*lanes:(j+1)*lanes])
		}
	}
}

// maxSimAVX2 is maxSimInto over dot4x2AVX2: four query tokens against
// two counted document tokens per call. Past the last query token (or the
// last counted document token) a block repeats the last one and ignores
// its products, so each product is computed the same way wherever it
// falls. dim must be a positive multiple of 8.
func maxSimAVX2(q, d []float32, dim int, dmask []bool, best []float32) {
	nq, nd := len(best), len(d)/dim
	if nq == 0 || nd == 0 {
		return
	}
	q = q[:nq*dim]
	counted := func(j int) bool { return dmask == nil || dmask[j] }
	var out [8]float32
	for i := 0; i < nq; i += 4 {
		p0 := &q[i*dim]
		p1 := &q[min(i+1, nq-1)*dim]
		p2 := &q[min(i+2, nq-1)*dim]
		p3 := &q[min(i+3, nq-1)*dim]
		b0, b1, b2, b3 := best[i], best[min(i+1, nq-1)], best[min(i+2, nq-1)], best[min(i+3, nq-1)]
		for j := 0; j < nd; j++ {
			if !counted(j) {
				continue
			}
			j1 := j + 1
			for j1 < nd && !counted(j1) {
				j1++
			}
			if j1 == nd {
				dot4x2AVX2(p0, p1, p2, p3, &d[j*dim], &d[j*dim], dim, &out)
			} else {
				dot4x2AVX2(p0, p1, p2, p3, &d[j*dim], &d[j1*dim], dim, &out)
			}
			b0, b1, b2, b3 = max(b0, out[0], out[4]), max(b1, out[1], out[5]), max(b2, out[2], out[6]), max(b3, out[3], out[7])
			j = j1
		}
		best[i] = b0
		if i+1 < nq {
			best[i+1] = b1
		}
		if i+2 < nq {
			best[i+2] = b2
		}
		if i+3 < nq {
			best[i+3] = b3
		}
	}
}

// maxSimGo is the portable maxSimInto. Query tokens are taken four at a time
// against two document tokens, so that each loaded value serves several
// products and eight independent sums are in flight (BenchmarkMaxSim
// reports ns per product).
func maxSimGo(q, d []float32, dim int, dmask []bool, best []float32) {
	nq, nd := len(best), len(d)/dim
	i := 0
	for ; i+4 <= nq; i += 4 {
		q0 := q[i*dim : (i+1)*dim]
		q1 := q[(i+1)*dim : (i+2)*dim]
		q2 := q[(i+2)*dim : (i+3)*dim]
		q3 := q[(i+3)*dim : (i+4)*dim]
		b0, b1, b2, b3 := best[i], best[i+1], best[i+2], best[i+3]
		j := 0
		if dmask == nil {
			for ; j+2 <= nd; j += 2 {
				s0, s1, s2, s3, t0, t1, t2, t3 := dot4x2(q0, q1, q2, q3, d[j*dim:(j+1)*dim], d[(j+1)*dim:(j+2)*dim])
				b0, b1, b2, b3 = max(b0, s0, t0), max(b1, s1, t1), max(b2, s2, t2), max(b3, s3, t3)
			}
		}
		for ; j < nd; j++ {
			if dmask != nil && !dmask[j] {
				continue
			}
			s0, s1, s2, s3 := dot4(q0, q1, q2, q3, d[j*dim:(j+1)*dim])
			b0, b1, b2, b3 = max(b0, s0), max(b1, s1), max(b2, s2), max(b3, s3)
		}
		best[i], best[i+1], best[i+2], best[i+3] = b0, b1, b2, b3
	}
	for ; i < nq; i++ {
		qi := q[i*dim : (i+1)*dim]
		for j := range nd {
			if dmask != nil && !dmask[j] {
				continue
			}
			best[i] = max(best[i], dot(qi, d[j*dim:(j+1)*dim]))
		}
	}
}

// dot4x2 returns the inner products of v and w with four vectors of their
// length: eight independent sums over six loads per step.
func dot4x2(a0, a1, a2, a3, v, w []float32) (s0, s1, s2, s3, t0, t1, t2, t3 float32) {
	n := len(v)
	a0, a1, a2, a3, w = a0[:n], a1[:n], a2[:n], a3[:n], w[:n]
	for k := 0; k < n; k++ {
		x, y := v[k], w[k]
		c0, c1, c2, c3 := a0[k], a1[k], a2[k], a3[k]
		s0 += c0 * x
		s1 += c1 * x
		s2 += c2 * x
		s3 += c3 * x
		t0 += c0 * y
		t1 += c1 * y
		t2 += c2 * y
		t3 += c3 * y
	}
	return
}

// dot4 returns the inner products of v with four vectors of its length.
func dot4(a0, a1, a2, a3, v []float32) (s0, s1, s2, s3 float32) {
	n := len(v)
	a0, a1, a2, a3 = a0[:n], a1[:n], a2[:n], a3[:n]
	for k := 0; k < n; k++ {
		x := v[k]
		s0 += a0[k] * x
		s1 += a1[k] * x
		s2 += a2[k] * x
		s3 += a3[k] * x
	}
	return
}

// dot is the inner product of two equally long vectors, unrolled so that
// four independent sums hide the latency of floating-point adds.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		aa := a[i : i+8 : i+8]
		bb := b[i : i+8 : i+8]
		s0 += aa[0]*bb[0] + aa[4]*bb[4]
		s1 += aa[1]*bb[1] + aa[5]*bb[5]
		s2 += aa[2]*bb[2] + aa[6]*bb[6]
		s3 += aa[3]*bb[3] + aa[7]*bb[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// combine turns per-query-token maxima into a score.
func combine(s Scoring, best []float32) float32 {
	var sum float32
	for _, b := range best {
		if !math.IsInf(float64(b), -1) {
			sum += b
		}
	}
	if s == ScoreAvgMax && len(best) > 0 {
		return sum / float32(len(best))
	}
	return sum
}
