package latecollect

import (
	"slices"
	"sync"
	"time"
)

// DefaultEstimateRank is the rank, among a query token's centroids by
// score, of the centroid whose score stands in for the token's best match
// in a document none of whose tokens lies under that query token's own
// probed centroids (the list stage's estimate; WARP's "missing similarity
// estimate"). Measured on SciFact's as-built index (docs: latecollect
// README, "The list stage").
const DefaultEstimateRank = 256

// listStageLocked scores the candidates of stage 2 from the code lists of
// the centroids the query tokens probed (tops), replacing the
// candidates' scores and returning the best keep of them best first (all
// of them when tracing):
//
//   - every token listed under a probed centroid whose document is a
//     candidate is scored from its residual code against every query
//     token (lane), and a document keeps per lane the best of its tokens
//     so scored (listMax): the union of the probed lists bounds each
//     lane from below, more tightly than the lists of its own query
//     token alone would;
//   - a lane none of whose own probed lists holds a token of the
//     document is raised to the estimate, the score of the query token's
//     centroid at rank DefaultEstimateRank: the document's best token for
//     it lies under a centroid it did not probe;
//   - the document's score combines its lanes as an exact score does.
//
// The lists are scored in two shares of about equal entries, each into a
// slab of its own, merged by max.
func (f *residualFamily) listStageLocked(query, table []float32, nq, stride int, tops [][]int32, cands []scored, keep int, so SearchOptions) []scored {
	t0 := time.Now()
	r := f.rc
	nlist := r.cb.nlist
	cbytes := r.cb.codeBytes()
	// The distinct probed lists, each with the mask of the query tokens
	// that probed it, and the entries they hold.
	words := (nq + lutBlock - 1) / lutBlock
	at := make([]int32, nlist) // a list's index in order, plus one
	var order []int32
	var masks []uint32
	for q, top := range tops {
		for _, c := range top {
			i := int(at[c]) - 1
			if i < 0 {
				i = len(order)
				at[c] = int32(i + 1)
				order = append(order, c)
				masks = append(masks, make([]uint32, words)...)
			}
			masks[i*words+q/32] |= 1 << (q % 32)
		}
	}
	total := 0
	for _, c := range order {
		total += len(r.clists[c].docs)
	}
	rt := newResidualTables(query, nq, f.opts.Dim, table, stride, nlist, r.cb.lo, r.cb.hi, f.opts.Parallelism, order)
	if total >= pairTablesFrom {
		rt.withPairs(f.opts.Parallelism)
		defer rt.release()
	}
	depth := DefaultEstimateRank
	if so.listEst > 0 {
		depth = so.listEst
	}
	est := laneEstimates(table, stride, nq, nlist, depth)

	slots := slotsPool.Get().(*[]int32)
	defer slotsPool.Put(slots)
	slot := growSlots(slots, int(r.maxNum)+1)
	// A bit per docnum says which are candidates: the lists are read
	// entry by entry, most of them other documents', and a million
	// documents' bits stay in the cache where their slots do not.
	bitsp := candBitsPool.Get().(*[]uint64)
	defer candBitsPool.Put(bitsp)
	isCand := growBits(bitsp, int(r.maxNum>>6)+1)
	iota := make([]int32, len(cands))
	for i, c := range cands {
		slot[c.num] = int32(i)
		isCand[c.num>>6] |= 1 << (c.num & 63)
		iota[i] = int32(i)
	}
	defer func() {
		for _, c := range cands {
			slot[c.num] = -1
			isCand[c.num>>6] = 0
		}
	}()

	parts := max(1, min(f.opts.Parallelism, 2))
	if total < 4096 {
		parts = 1
	}
	cuts := []int{0}
	acc := 0
	for i, c := range order {
		acc += len(r.clists[c].docs)
		if len(cuts) < parts && acc*parts >= total*len(cuts) {
			cuts = append(cuts, i+1)
		}
	}
	for len(cuts) <= parts {
		cuts = append(cuts, len(order))
	}
	lanes := rt.blocks * lutBlock
	slabs := make([][]int16, parts)
	owns := make([][]uint32, parts)
	t1 := time.Now()
	inParts(parts, parts, func(p, _, _ int) {
		max16 := make([]int16, len(cands)*lanes)
		for i := range max16 {
			max16[i] = noScore
		}
		own := make([]uint32, len(cands)*words)
		// The candidates' entries of a list, by slot, and their codes.
		var at []uint32
		var codes []byte
		for i := cuts[p]; i < cuts[p+1]; i++ {
			c := order[i]
			l := &r.clists[c]
			m := masks[i*words : (i+1)*words]
			at, codes = at[:0], codes[:0]
			prev := int32(-1)
			for j, num := range l.docs {
				if isCand[num>>6]&(1<<(num&63)) == 0 {
					continue
				}
				s := slot[num]
				at = append(at, uint32(s))
				codes = append(codes, l.codes[j*cbytes:(j+1)*cbytes]...)
				if s != prev {
					for w, v := range m {
						own[int(s)*words+w] |= v
					}
					prev = s
				}
			}
			if len(at) > 0 {
				rt.listMax(max16, int(c), at, iota, codes, cbytes)
			}
		}
		slabs[p], owns[p] = max16, own
	})
	max16, own := slabs[0], owns[0]
	for p := 1; p < parts; p++ {
		for i, v := range slabs[p] {
			max16[i] = max(max16[i], v)
		}
		for i, v := range owns[p] {
			own[i] |= v
		}
	}
	best := make([]float32, lanes)
	for i := range cands {
		rt.score(best, max16[i*lanes:(i+1)*lanes])
		for q := range nq {
			if own[i*words+q/32]&(1<<(q%32)) == 0 {
				best[q] = max(best[q], est[q])
			}
		}
		cands[i].score = combine(so.Scoring, best[:nq])
	}
	if tr := so.trace; tr != nil {
		slices.SortFunc(cands, byScore)
		tr.listSetup += t1.Sub(t0)
		tr.listScan += time.Since(t1)
		for _, c := range order {
			for _, num := range r.clists[c].docs {
				if slot[num] >= 0 {
					tr.listTokens++
				}
			}
		}
		tr.residual = slices.Clone(cands)
		return cands
	}
	return bestFirst(cands, keep)
}

// slotsPool recycles the docnum → candidate slot arrays, all -1 between
// uses.
var slotsPool = sync.Pool{New: func() any { return new([]int32) }}

// candBitsPool recycles the list stage's candidate bits, all zero between
// uses.
var candBitsPool = sync.Pool{New: func() any { return new([]uint64) }}

// growBits returns (*p)[:n], all zero: the candidate bits are cleared
// after each use.
func growBits(p *[]uint64, n int) []uint64 {
	if len(*p) < n {
		*p = make([]uint64, n)
	}
	return (*p)[:n]
}

// growSlots returns (*p)[:n], grown with -1 where needed.
func growSlots(p *[]int32, n int) []int32 {
	if len(*p) < n {
		old := len(*p)
		*p = slices.Grow(*p, n-old)[:n]
		for i := old; i < n; i++ {
			(*p)[i] = -1
		}
	}
	return (*p)[:n]
}

// laneEstimates returns, for each query token q < nq, about the score
// of its centroid at rank depth (1 for the best): table[c*stride+q] is
// its score against centroid c. The rank is taken in a sample of about
// estimateSample centroids (every step-th), at rank depth/step, which
// reads a slice of the table once instead of selecting over all of it.
func laneEstimates(table []float32, stride, nq, nlist, depth int) []float32 {
	step := max(1, nlist/estimateSample)
	n := (nlist + step - 1) / step
	k := min(n, max(1, (depth+step/2)/step)) - 1
	cols := make([]float32, nq*n)
	for i := range n {
		row := table[i*step*stride : i*step*stride+nq]
		for q, v := range row {
			cols[q*n+i] = v
		}
	}
	est := make([]float32, nq)
	for q := range est {
		est[q] = nthSmallest(cols[q*n:(q+1)*n], n-1-k)
	}
	return est
}

// estimateSample is about the number of centroids laneEstimates reads.
const estimateSample = 1024
