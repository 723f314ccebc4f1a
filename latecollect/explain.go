package latecollect

import "fmt"

// Explanation is what the exact score of one document is made of, which
// the scorer computes and throws away: for each query token, the document
// token it matched best (ReAtt's "retrieval is attention").
type Explanation struct {
	// Max[i] is query token i's largest inner product with a token of
	// the document: the maximum the exact score takes for it, each
	// product computed by the kernel the exact stage uses.
	Max []float32
	// Row[i] is the row, in the stored token matrix, of the token that
	// gave Max[i] (the first row among equal products); -1 when the
	// document has no token.
	Row []int
	// Score combines Max as the exact stage does (avg-max or sum-max):
	// bit for bit the document's exact score.
	Score float32
}

// Explainer explains documents' exact scores for one query. It is not
// safe for concurrent use.
type Explainer struct {
	q       []float32
	k       *exactKernels
	dim     int
	scoring Scoring
	block   []float32
	dots    []float32
	scratch dotScratch
}

// NewExplainer checks a query (token vectors of dim values row after row,
// as Search takes it) and lays it out for the kernels once, for every
// document Explain is then given. It explains the scores a search in mode
// gives: Candidates and Exhaustive score as the exact stage does (I8
// blobs in int8), Reference in float32.
func NewExplainer(query []float32, dim int, scoring Scoring, mode Mode) (*Explainer, error) {
	if !scoring.valid() {
		return nil, fmt.Errorf("latecollect: explain: %w: Scoring %q", ErrBadOptions, scoring)
	}
	if dim <= 0 || len(query)%dim != 0 {
		return nil, fmt.Errorf("latecollect: explain: %w: %d values is not a whole number of %d-dimensional tokens", ErrBadVector, len(query), dim)
	}
	if err := checkFinite(query, dim); err != nil {
		return nil, fmt.Errorf("latecollect: explain: query %w", err)
	}
	if mode != Candidates && mode != Exhaustive && mode != Reference {
		return nil, fmt.Errorf("latecollect: explain: %w: %v", ErrBadOptions, mode)
	}
	k := newExactKernels(query, dim, newQueryLanes(query, dim), mode)
	return &Explainer{q: query, k: k, dim: dim, scoring: scoring}, nil
}

// Explain scores a stored token blob (EncodeTokens' format) exactly as a
// search in the Explainer's mode scores it (scoreBlob), and reports which
// document token gave each query token's maximum. Each product is
// computed as scoreBlob computes it (the same kernel, on the same rows),
// so Max holds the maxima the exact score takes and Score is that score,
// bit for bit. It costs what scoring the document costs, plus one comparison
// per product: a caller explains the hits it returns, not every
// candidate.
func (x *Explainer) Explain(blob []byte) (Explanation, error) {
	h, err := parseHeader(blob)
	if err != nil {
		return Explanation{}, fmt.Errorf("latecollect: explain: %w", err)
	}
	if h.dim != x.dim {
		return Explanation{}, fmt.Errorf("latecollect: explain: %w: document tokens of dimension %d, query tokens of %d", ErrBadVector, h.dim, x.dim)
	}
	nq := len(x.q) / x.dim
	ex := Explanation{Max: make([]float32, nq), Row: make([]int, nq)}
	if h.enc == I8 && x.k.quantise {
		x.k.i8().argmax(blob[headerSize:], h.count, ex.Max, ex.Row)
	} else {
		x.argmaxBlob(blob, h, ex.Max, ex.Row)
	}
	ex.Score = combine(x.scoring, ex.Max)
	return ex, nil
}

// argmaxBlob sets best as maxSimBlob does, decoding the blob in the same
// blocks and computing every product with the same kernel, and row[i] to
// the row whose product gave best[i], the first among equals (-1 when the
// blob has no rows).
func (x *Explainer) argmaxBlob(blob []byte, h blobHeader, best []float32, row []int) {
	dim, nq := h.dim, len(best)
	fillInf(best)
	for i := range row {
		row[i] = -1
	}
	if nq == 0 {
		return
	}
	rows := max(1, exactBlockBytes/(4*dim))
	if len(x.block) < rows*dim {
		x.block = make([]float32, rows*dim)
	}
	if len(x.dots) < rows*nq {
		x.dots = make([]float32, rows*nq)
	}
	block, dots := x.block, x.dots
	for from := 0; from < h.count; from += rows {
		to := min(h.count, from+rows)
		d := block[:(to-from)*dim]
		decodeRows(blob, h, from, to, d)
		dotsInto(x.q, x.k.ql, d, dim, nq, dots, &x.scratch)
		for j := range to - from {
			p := dots[j*nq : (j+1)*nq]
			for i, v := range p {
				if v > best[i] {
					best[i], row[i] = v, from+j
				}
			}
		}
	}
}

// dotScratch holds dotsInto's buffers for the AVX-512 kernels: a padded
// last tile of rows and one tile's products.
type dotScratch struct{ pad, tile []float32 }

// dotsInto sets out[j*nq+i] to the inner product of query token i with row
// j of d, each product summed exactly as maxSimInto sums it on this CPU
// (queryLanes.maxSimInto when ql is not nil, maxSimAVX2, or maxSimGo):
// the maximum of a query token's products is then bit for bit the one
// maxSim takes.
func dotsInto(q []float32, ql *queryLanes, d []float32, dim, nq int, out []float32, s *dotScratch) {
	nd := len(d) / dim
	switch {
	case ql != nil:
		ql.dotsAll(d, nq, out, s)
	case useAVX2 && dim%8 == 0:
		// dot4x2AVX2's products depend only on their two vectors
		// (kernel_amd64.s), whichever slots they take.
		var o [8]float32
		for i := 0; i < nq; i += 4 {
			p0 := &q[i*dim]
			p1 := &q[min(i+1, nq-1)*dim]
			p2 := &q[min(i+2, nq-1)*dim]
			p3 := &q[min(i+3, nq-1)*dim]
			n := min(4, nq-i)
			for j := 0; j < nd; j += 2 {
				j1 := min(j+1, nd-1)
				dot4x2AVX2(p0, p1, p2, p3, &d[j*dim], &d[j1*dim], dim, &o)
				copy(out[j*nq+i:j*nq+i+n], o[:n])
				if j+1 < nd {
					copy(out[(j+1)*nq+i:(j+1)*nq+i+n], o[4:4+n])
				}
			}
		}
	default:
		// maxSimGo: query tokens four at a time, each product summed
		// value by value (dot4x2 and dot4 alike), the rest with dot.
		i := 0
		for ; i+4 <= nq; i += 4 {
			q0 := q[i*dim : (i+1)*dim]
			q1 := q[(i+1)*dim : (i+2)*dim]
			q2 := q[(i+2)*dim : (i+3)*dim]
			q3 := q[(i+3)*dim : (i+4)*dim]
			for j := range nd {
				o := out[j*nq+i : j*nq+i+4]
				o[0], o[1], o[2], o[3] = dot4(q0, q1, q2, q3, d[j*dim:(j+1)*dim])
			}
		}
		for ; i < nq; i++ {
			qi := q[i*dim : (i+1)*dim]
			for j := range nd {
				out[j*nq+i] = dot(qi, d[j*dim:(j+1)*dim])
			}
		}
	}
}

// dotsAll sets out[j*nq+i], nq = ql.nq, to the inner product of query
// token i with row j of d, chunk by chunk of query tokens as maxSimInto
// goes, with the dot kernels that sum each product as the maxSim kernels
// do.
func (ql *queryLanes) dotsAll(d []float32, nq int, out []float32, s *dotScratch) {
	dim := ql.dim
	nd := len(d) / dim
	if cap(s.pad) < laneTile*dim {
		s.pad = make([]float32, laneTile*dim)
	}
	if len(s.tile) < laneTile*32 {
		s.tile = make([]float32, laneTile*32)
	}
	off := 0
	for c := 0; c < nq; c += 32 {
		lanes := chunkLanes(nq - c)
		n := min(lanes, nq-c)
		kernel := dot8x32AVX512
		if lanes == 16 {
			kernel = dot8x16AVX512
		}
		for t := 0; t < nd; t += laneTile {
			rows := min(laneTile, nd-t)
			src := &d[t*dim]
			if rows < laneTile {
				pad := s.pad[:laneTile*dim]
				clear(pad[copy(pad, d[t*dim:nd*dim]):])
				src = &pad[0]
			}
			kernel(&ql.qt[off], src, dim, dim, &s.tile[0], lanes)
			for j := range rows {
				copy(out[(t+j)*nq+c:(t+j)*nq+c+n], s.tile[j*lanes:j*lanes+n])
			}
		}
		off += dim * lanes
	}
}
