package latecollect

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"
)

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
//     document (its best token for the query token lies under a centroid
//     the query token did not probe) is raised to the document's
//     centroid interaction (centroidBest): the best score of the query
//     token against a centroid of the document's tokens. A fixed estimate,
//     the score of the query token's centroid at one rank, as WARP
//     estimates a missing similarity, passed 0.962 of the exhaustive top
//     10 of a million documents to the exact stage; the centroid
//     interaction 0.986 (50 queries; docs: latecollect README);
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
	var est []float32
	if so.listEst > 0 {
		est = laneEstimates(table, stride, nq, nlist, so.listEst)
	}

	// A bit per docnum says which are candidates: the lists are read
	// entry by entry, most of them other documents', and a million
	// documents' bits stay in the cache. A candidate's slot is its rank
	// by docnum: the candidates before its word of bits (rank) and the
	// bits before it in the word. Nothing per docnum but the bits is read.
	slices.SortFunc(cands, byNum)
	bitsp := candBitsPool.Get().(*[]uint64)
	defer candBitsPool.Put(bitsp)
	nw := int(r.maxNum>>6) + 1
	isCand := growBits(bitsp, nw)
	rankp := candRankPool.Get().(*[]int32)
	defer candRankPool.Put(rankp)
	if cap(*rankp) < nw {
		*rankp = make([]int32, nw)
	}
	rank := (*rankp)[:nw]
	iota := make([]int32, len(cands))
	w := 0
	for i, c := range cands {
		for ; w <= int(c.num>>6); w++ {
			rank[w] = int32(i)
		}
		isCand[c.num>>6] |= 1 << (c.num & 63)
		iota[i] = int32(i)
	}
	defer func() {
		for _, c := range cands {
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
				word := isCand[num>>6]
				if word&(1<<(num&63)) == 0 {
					continue
				}
				s := rank[num>>6] + int32(bits.OnesCount64(word&(1<<(num&63)-1)))
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
	// The shares merged by max, and each candidate's score: in shares of
	// the candidates, as the centroid interactions read the document
	// map and the score table at random.
	max16, own := slabs[0], owns[0]
	inParts(len(cands), max(1, min(f.opts.Parallelism, 2, len(cands)/64)), func(_, from, to int) {
		for p := 1; p < parts; p++ {
			for i := from * lanes; i < to*lanes; i++ {
				max16[i] = max(max16[i], slabs[p][i])
			}
			for i := from * words; i < to*words; i++ {
				own[i] |= owns[p][i]
			}
		}
		best := make([]float32, lanes)
		cent := make([]float32, nq)
		for i := from; i < to; i++ {
			rt.score(best, max16[i*lanes:(i+1)*lanes])
			missing := false
			for q := range nq {
				missing = missing || own[i*words+q/32]&(1<<(q%32)) == 0
			}
			if missing {
				if est != nil {
					copy(cent, est)
				} else {
					centroidBest(r.docs[cands[i].num].cents, table, stride, cent)
				}
				for q := range nq {
					if own[i*words+q/32]&(1<<(q%32)) == 0 {
						best[q] = max(best[q], cent[q])
					}
				}
			}
			cands[i].score = combine(so.Scoring, best[:nq])
		}
	})
	if tr := so.trace; tr != nil {
		slices.SortFunc(cands, byScore)
		tr.listSetup += t1.Sub(t0)
		tr.listScan += time.Since(t1)
		for _, c := range order {
			for _, num := range r.clists[c].docs {
				if isCand[num>>6]&(1<<(num&63)) != 0 {
					tr.listTokens++
				}
			}
		}
		tr.residual = slices.Clone(cands)
		return cands
	}
	return bestFirst(cands, keep)
}

// candBitsPool recycles the list stage's candidate bits, all zero between
// uses, and candRankPool its ranks per word of bits.
var (
	candBitsPool = sync.Pool{New: func() any { return new([]uint64) }}
	candRankPool = sync.Pool{New: func() any { return new([]int32) }}
)

// byNum orders candidates by docnum.
func byNum(a, b scored) int { return cmp.Compare(a.num, b.num) }

// growBits returns (*p)[:n], all zero: the candidate bits are cleared
// after each use.
func growBits(p *[]uint64, n int) []uint64 {
	if len(*p) < n {
		*p = make([]uint64, n)
	}
	return (*p)[:n]
}

// centroidBest sets best[q] to the largest score table[c*stride+q] of a
// centroid c in cents, the document's distinct centroids (-Inf for none):
// its centroid interaction, as PLAID calls it, for query token q. The
// stride is a multiple of 8, and best holds at most stride values.
func centroidBest(cents []uint16, table []float32, stride int, best []float32) {
	for q := range best {
		best[q] = float32(math.Inf(-1))
	}
	if len(cents) == 0 {
		return
	}
	if useAVX2 {
		var acc [8]float32
		_ = table[int(cents[len(cents)-1])*stride+(len(best)+7)&^7-1] // cents ascend
		for off := 0; off < len(best); off += 8 {
			for j := range acc {
				acc[j] = float32(math.Inf(-1))
			}
			maxRows8AVX2(&table[off], stride, &cents[0], len(cents), &acc)
			copy(best[off:], acc[:])
		}
		return
	}
	for _, c := range cents {
		row := table[int(c)*stride:][:len(best)]
		for q, v := range row {
			if v > best[q] {
				best[q] = v
			}
		}
	}
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
