package latecollect

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tandemsearch/tandem/internal/blas"
)

// Defaults of the residual-code search: the cheapest setting measured on
// SciFact with bge-small-en-v1.5 tokens that finds at least 97% of the
// exhaustive top 10 (0.978 on 60 queries, 0.979 on all 300; see the
// README's sweep). The residual stage is most of the search time.
const (
	// DefaultCentroidProbe is the number of centroids each query token
	// probes for candidate documents.
	DefaultCentroidProbe = 8
	// DefaultCentroidCandidates bounds the documents scored through the
	// centroid ids of all their tokens.
	DefaultCentroidCandidates = 1024
	// DefaultResidualCandidates bounds the documents scored from their
	// residual codes.
	DefaultResidualCandidates = 512
	// DefaultExactCandidates is the number of documents rescored exactly
	// from their full-precision tokens, read from the store.
	DefaultExactCandidates = 32
)

// scored is a candidate and its score at the latest stage it reached.
type scored struct {
	num   uint64
	score float32
}

func byScore(a, b scored) int {
	if c := cmp.Compare(b.score, a.score); c != 0 {
		return c
	}
	return cmp.Compare(a.num, b.num)
}

// searchResidualLocked runs the staged search of the residual-code index:
//
//  1. the query tokens are scored against every centroid once;
//  2. each query token probes its best NProbe centroids; the
//     documents listed there (and allowed) are ranked by the sum over
//     query tokens of the best probed centroid they have; the best
//     CandidateCap go on (when a filter allows no more documents than
//     that, all allowed documents go on instead);
//  3. those are scored through the centroid ids of all their tokens (each
//     token scored as its centroid); the best ResidualCap go on;
//  4. those are scored from centroid + residual code;
//  5. the best ExactCap are rescored exactly from the stored tokens.
//
// Each hit carries the score of the last stage it reached: exact for the
// hits of stage 5, residual-code scores for the others.
func (x *Index) searchResidualLocked(ctx context.Context, query []float32, so SearchOptions) ([]Hit, error) {
	r := x.mu.rc
	if r == nil || so.K == 0 {
		return nil, nil
	}
	dim := x.opts.Dim
	nq := len(query) / dim
	stride := (nq + lutBlock - 1) / lutBlock * lutBlock
	table := make([]float32, r.cb.nlist*stride)
	if err := scoreCentroids(query, nq, dim, r.cb.cent, stride, table); err != nil {
		return nil, fmt.Errorf("latecollect: search: %w", err)
	}

	var cands []scored
	if so.Allow != nil && x.allowedAtMostLocked(so.Allow, so.CandidateCap) {
		for it := so.Allow.Iterator(); it.HasNext(); {
			if num := it.Next(); x.hasDocLocked(num) {
				cands = append(cands, scored{num: num})
			}
		}
	} else {
		cands = x.probeLocked(table, nq, stride, so)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Stage 3: centroid interaction over every token of each candidate.
	keep3 := max(so.ResidualCap, so.K)
	if len(cands) > keep3 {
		x.parallel(len(cands), func(i int, best []float32) {
			d := r.docs[cands[i].num]
			fillInf(best[:stride])
			centroidMax(best, table, stride, d.cids)
			cands[i].score = combine(so.Scoring, best[:nq])
		}, stride)
		slices.SortFunc(cands, byScore)
		cands = cands[:keep3]
	}

	// Stage 4: residual codes, scored through lookup tables.
	cbytes := r.cb.codeBytes()
	lut, base := make([]float32, stride*dim/4*16), make([]float32, stride)
	residualTable(query, nq, dim, stride, r.cb.lo, r.cb.hi, lut, base)
	x.parallel(len(cands), func(i int, best []float32) {
		d := r.docs[cands[i].num]
		fillInf(best)
		residualMax(best, table, stride, lut, d.cids, d.codes, cbytes)
		for q := range nq {
			best[q] += base[q]
		}
		cands[i].score = combine(so.Scoring, best[:nq])
	}, stride)
	slices.SortFunc(cands, byScore)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Stage 5: exact, from the stored tokens.
	nExact := min(len(cands), so.ExactCap)
	errs := make([]error, nExact)
	x.parallel(nExact, func(i int, best []float32) {
		s, err := x.exactScore(query, cands[i].num, so.Scoring, best)
		if err != nil {
			errs[i] = err
			return
		}
		cands[i].score = s
	}, nq)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	hits := make([]Hit, len(cands))
	for i, c := range cands {
		hits[i] = Hit{DocNum: c.num, Score: c.score}
	}
	return topHits(hits, so.K), nil
}

// probeLocked is stage 2: the documents listed under each query token's
// best centroids, ranked by the sum over query tokens of the best probed
// centroid score they have, the best CandidateCap of them.
func (x *Index) probeLocked(table []float32, nq, stride int, so SearchOptions) []scored {
	r := x.mu.rc
	nlist := r.cb.nlist
	nprobe := min(so.NProbe, nlist)
	type acc struct {
		score float32
		last  int32
	}
	slot := map[uint32]int32{}
	var accs []acc
	var nums []uint32
	order := make([]int32, nlist)
	for q := range nq {
		for c := range order {
			order[c] = int32(c)
		}
		topCentroids(order, table, stride, q, nprobe)
		for _, c := range order[:nprobe] {
			s := table[int(c)*stride+q]
			for _, num := range r.lists[c] {
				i, ok := slot[num]
				if !ok {
					if so.Allow != nil && !so.Allow.Contains(uint64(num)) {
						continue
					}
					i = int32(len(accs))
					slot[num] = i
					accs = append(accs, acc{last: -1})
					nums = append(nums, num)
				}
				// Centroids come best first, so the first is the max.
				if a := &accs[i]; a.last != int32(q) {
					a.last = int32(q)
					a.score += s
				}
			}
		}
	}
	cands := make([]scored, len(nums))
	for i, num := range nums {
		cands[i] = scored{num: uint64(num), score: accs[i].score}
	}
	slices.SortFunc(cands, byScore)
	if len(cands) > so.CandidateCap {
		cands = cands[:so.CandidateCap]
	}
	return cands
}

// topCentroids moves the n centroids with the best score for query token
// q to the front of order, best first (ties by id).
func topCentroids(order []int32, table []float32, stride, q, n int) {
	score := func(c int32) float32 { return table[int(c)*stride+q] }
	better := func(a, b int32) int {
		if c := cmp.Compare(score(b), score(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}
	if n*8 >= len(order) {
		slices.SortFunc(order, better)
		return
	}
	// Partial selection: keep the best n in order[:n], sorted.
	top := order[:n]
	slices.SortFunc(top, better)
	for i := n; i < len(order); i++ {
		c := order[i]
		if better(c, top[n-1]) >= 0 {
			continue
		}
		j := n - 1
		for j > 0 && better(c, top[j-1]) < 0 {
			top[j] = top[j-1]
			j--
		}
		order[i] = top[n-1]
		top[j] = c
	}
}

// exactScore scores a document from its stored tokens, as Exhaustive
// mode does. best has room for the query's tokens.
func (x *Index) exactScore(query []float32, num uint64, s Scoring, best []float32) (float32, error) {
	var blob []byte
	if r := x.mu.rc; r != nil && r.tf != nil {
		if d, ok := r.docs[num]; ok && d.loc.size > 0 {
			b, err := r.tf.read(d.loc, nil)
			if err == nil {
				blob = b
			} else {
				x.tokenFileErrors.Add(1) // read the store instead
			}
		}
	}
	ok := blob != nil
	if !ok {
		var err error
		if blob, ok, err = x.st.Blob(num, x.blob); err != nil {
			return 0, fmt.Errorf("latecollect: search: read %s of document %d: %w", x.blob, num, err)
		}
	}
	if !ok {
		// Deleted since the index applied it: it scores as empty until
		// the delete is applied.
		return float32(math.Inf(-1)), nil
	}
	e, err := x.entryNoCopy(num, blob)
	if err != nil {
		return 0, fmt.Errorf("latecollect: search: %w", err)
	}
	rows := make([]float32, e.h.count*x.opts.Dim)
	decodeRows(e.blob, e.h, 0, e.h.count, rows)
	maxSim(query, rows, x.opts.Dim, nil, best)
	return combine(s, best), nil
}

// parallel calls fn(i, scratch) for i in [0, n) over at most
// Parallelism goroutines, each with its own scratch of scratchLen floats.
func (x *Index) parallel(n int, fn func(i int, scratch []float32), scratchLen int) {
	workers := max(1, min(x.opts.Parallelism, n/8))
	if workers == 1 {
		scratch := make([]float32, scratchLen)
		for i := range n {
			fn(i, scratch)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scratch := make([]float32, scratchLen)
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i, scratch)
			}
		}()
	}
	wg.Wait()
}

func fillInf(v []float32) {
	inf := float32(math.Inf(-1))
	for i := range v {
		v[i] = inf
	}
}

// scoreCentroids sets table[c*stride+q] to the inner product of query
// token q with centroid c, for q < nq, with one BLAS matrix product; the
// columns from nq to stride are left as they are (zero in a new table).
func scoreCentroids(query []float32, nq, dim int, cent []float32, stride int, table []float32) error {
	return blas.MulT(cent, len(cent)/dim, query, nq, dim, table, stride)
}

// exhaustiveFromStoreLocked scores every allowed document the residual
// index holds exactly, from its stored tokens: the reference.
func (x *Index) exhaustiveFromStoreLocked(ctx context.Context, query []float32, so SearchOptions) ([]Hit, error) {
	r := x.mu.rc
	if r == nil {
		return nil, nil
	}
	var nums []uint64
	for num := range r.docs {
		if so.Allow == nil || so.Allow.Contains(num) {
			nums = append(nums, num)
		}
	}
	slices.Sort(nums)
	nq := len(query) / x.opts.Dim
	hits := make([]Hit, len(nums))
	errs := make([]error, len(nums))
	x.parallel(len(nums), func(i int, best []float32) {
		if ctx.Err() != nil {
			return
		}
		s, err := x.exactScore(query, nums[i], so.Scoring, best)
		hits[i], errs[i] = Hit{DocNum: nums[i], Score: s}, err
	}, nq)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return topHits(hits, so.K), nil
}
