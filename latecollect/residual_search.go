package latecollect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/blas"
	"github.com/tandemsearch/tandem/storage"
)

// Defaults of the residual-code search (the latecollect README, "The
// list stage", has the measurements).
const (
	// DefaultCentroidProbe is the number of centroids each query token
	// probes: stage 2 finds candidates in their docnum lists, and the
	// list stage scores the candidates' tokens in their code lists. On
	// SciFact's as-built index, 64 pass 0.881 of the exhaustive top 100 to
	// an exact stage of 128 documents (32: 0.819, 48: 0.860).
	DefaultCentroidProbe = 64
	// DepthProbeEntries bounds the list entries each query token probes
	// per hit asked for (withinBudget): its best centroids are probed
	// until their lists hold DepthProbeEntries·K entries, up to NProbe,
	// at least MinCentroidProbe. At K=100 that is 16,000: on SciFact
	// nearly every query token's 64 best centroids; on 100,000 synthetic
	// documents of 128 tokens (16,384 centroids of about 780 entries)
	// about 20. A top 10 probes a tenth as deep.
	DepthProbeEntries = 160
	// MinCentroidProbe is the fewest centroids a query token probes
	// whatever their lists hold; and it probes at least one centroid in
	// MinProbeShare (minProbe). Lists grow with the collection, but so
	// does the number of centroids, each covering less of the space: to
	// find a query token's neighbours as well, a finer partition must be
	// probed in more places. On a million synthetic documents (32,768
	// centroids), 8 probes found 0.940 of the exhaustive top 10 and 16
	// found 0.980 (20 queries), when a query token missing from a
	// document's lists took one estimate in the list stage; with the
	// document's centroid interaction there, 8, 10, 12 and 16 probes found
	// 0.982, 0.986, 0.988 and 0.986 (50 queries). On 100,000 (16,384
	// centroids), 8 found all of it.
	MinCentroidProbe = 8
	MinProbeShare    = 3072
	// DefaultCentroidCandidates bounds the documents the list stage
	// scores; raised with the hits asked for (DepthCandidates).
	DefaultCentroidCandidates = 1024
	// DefaultExactCandidates is the fewest documents the exact stage
	// rescores by default from their full-precision tokens.
	DefaultExactCandidates = 32
	// ExactBudget is the number of full-precision token values the exact
	// stage reads by default: SciFact's 32 documents of 327 384-d tokens
	// (8 MB of float16). On 100,000 synthetic documents of 128 128-d
	// tokens, 32 documents found 0.78 of the exhaustive top 10 and 128
	// found 0.99 (30 queries): 1-bit codes of 128 dimensions rank less
	// finely than of 384.
	ExactBudget = 4_000_000
	// MaxExactCandidates bounds the automatic exact stage.
	MaxExactCandidates = 1024
)

// stageTrace is what a traced residual-code search (SearchOptions.trace)
// records: the documents each stage passed on, in the order of the
// stage's scores where it has them.
type stageTrace struct {
	probed   []uint64 // stage 2
	residual []scored // the list stage, best first, with its scores
	// took is the time to the end of each stage: the centroid scores,
	// stages 2 to 5.
	took [5]time.Duration
	// The list stage's setup (tables, lanes, slots) and scan times, and
	// the tokens it scored.
	listSetup, listScan time.Duration
	listTokens          int
}

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

// search scores every allowed document exactly in Exhaustive and
// Reference modes, and runs the staged search otherwise
// (searchResidualLocked).
func (f *residualFamily) search(ctx context.Context, query []float32, so SearchOptions) ([]Hit, error) {
	if so.Mode == Exhaustive || so.Mode == Reference {
		return f.exhaustiveFromStoreLocked(ctx, query, so)
	}
	return f.searchResidualLocked(ctx, query, so)
}

// searchResidualLocked runs the staged search of the residual-code index:
//
//  1. the query tokens are scored against every centroid once;
//  2. each query token probes its best NProbe centroids; the
//     documents listed there (and allowed) are ranked by the sum over
//     query tokens of the best probed centroid they have; the best
//     CandidateCap go on (when a filter allows no more documents than
//     that, all allowed documents go on instead);
//  3. and 4. those are scored from the residual codes of their tokens
//     listed under the probed centroids (listStageLocked), unless all of
//     them go to stage 5 anyway, or the list stage would cost more than
//     the exact scores it saves (listStagePays);
//  5. the best ExactCap are rescored exactly from the stored tokens.
//
// The caps grow with K (depthCaps), so that the list fusion takes (K =
// the depth, 100 by default) ranks as the exhaustive search would. Every
// hit is one of the documents of stage 5 and carries its exact score;
// with a negative ExactCap (no exact stage) hits carry residual-code
// scores.
func (f *residualFamily) searchResidualLocked(ctx context.Context, query []float32, so SearchOptions) ([]Hit, error) {
	r := f.rc
	if r == nil || so.K == 0 {
		return nil, nil
	}
	so.CandidateCap = depthCaps(so.K, so.CandidateCap)
	if so.candCap > 0 {
		so.CandidateCap = so.candCap
	}
	start := time.Now()
	stage := func(i int) {
		if so.trace != nil {
			so.trace.took[i] = time.Since(start)
		}
	}
	dim := f.opts.Dim
	nq := len(query) / dim
	ql := newQueryLanes(query, dim)
	stride := centroidStride(nq, ql)
	kernels := newExactKernels(query, dim, ql, so.Mode)
	// Room for the int8 kernel's rows past nlist, to a multiple of 8.
	// The table is pooled: a new one of some megabytes is mapped afresh
	// by the runtime, and the kernels' first writes to it fault page
	// by page, which cost a million-document search more than the
	// scores themselves.
	tp := tablePool.Get().(*[]float32)
	defer tablePool.Put(tp)
	if n := (r.cb.nlist + 7) &^ 7 * stride; cap(*tp) < n {
		*tp = make([]float32, n)
	}
	table := (*tp)[:r.cb.nlist*stride]
	if qi := kernels.i8(); qi != nil && i8Centroids(dim) && qi.kernel == i8VNNI && nq <= 32 && stride == chunkLanes(nq) {
		// Writes every lane of every row.
		scoreCentroidsI8(qi, r.cb.int8(), stride, table, f.opts.Parallelism)
	} else {
		clear(table) // the padding lanes past nq are not written
		if err := scoreCentroids(query, nq, dim, r.cb.cent, stride, table, f.opts.Parallelism, ql); err != nil {
			return nil, fmt.Errorf("latecollect: search: %w", err)
		}
	}
	stage(0)

	tops := topCentroids(table, stride, nq, r.cb.nlist, min(so.NProbe, r.cb.nlist), f.opts.Parallelism)
	budget := DepthProbeEntries * min(so.K, 1<<20)
	if so.probeBudget != 0 {
		budget = so.probeBudget
	}
	tops = r.withinBudget(tops, budget)
	var cands []scored
	switch {
	case so.Allow != nil && allowedAtMost(f, so.Allow, so.CandidateCap):
		for it := so.Allow.Iterator(); it.HasNext(); {
			if num := it.Next(); f.has(num) {
				cands = append(cands, scored{num: num})
			}
		}
	default:
		probe := tops
		if so.candProbe > 0 {
			probe = make([][]int32, len(tops))
			for q, top := range tops {
				probe[q] = top[:min(len(top), so.candProbe)]
			}
		}
		cands = f.probeLocked(table, stride, probe, so)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stage(1)
	if tr := so.trace; tr != nil {
		for _, c := range cands {
			tr.probed = append(tr.probed, c.num)
		}
	}

	// Stages 3 and 4: the candidates' tokens listed under the probed
	// centroids, from their residual codes (listStageLocked). When every
	// candidate goes to the exact stage anyway, they are not needed; nor,
	// under the automatic ExactCap, when the few the list stage would
	// drop cost the exact stage less than the list stage costs
	// (listStagePays): then they all go to it.
	nExact := so.ExactCap
	switch {
	case nExact == 0:
		nExact = max(f.exactCapLocked(), f.depthExactLocked(so.K))
	case nExact > 0:
		nExact = max(nExact, so.K) // only these are ranked
	}
	switch {
	case nExact < 0:
		cands = f.listStageLocked(query, table, nq, stride, tops, cands, len(cands), so)
	case len(cands) <= nExact:
	case so.ExactCap == 0 && !f.listStagePays(tops, len(cands)-nExact):
		nExact = len(cands) // a cap of the caller's own is kept
	default:
		cands = f.listStageLocked(query, table, nq, stride, tops, cands, max(nExact, so.K), so)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stage(2)
	stage(3)

	// Stage 5: exact, from the stored tokens.
	nExact = max(0, min(len(cands), nExact))
	errs := make([]error, nExact)
	workers := exactWorkers{k: kernels}
	defer workers.close()
	parallelWith(f.opts.Parallelism, nExact, workers.scratch, func(i int, sc *exactScratch) {
		s, err := f.exactScore(query, cands[i].num, so.Scoring, sc)
		if err != nil {
			errs[i] = err
			return
		}
		cands[i].score = s
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	stage(4)
	if so.ExactCap >= 0 {
		// Only exact scores are ranked: a residual-code score is no
		// bound on the exact one in either direction.
		cands = cands[:nExact]
	}
	hits := make([]Hit, len(cands))
	for i, c := range cands {
		hits[i] = Hit{DocNum: c.num, Score: c.score}
	}
	return topHits(hits, so.K), nil
}

// The residual-code search's caps per hit asked for: with K hits, at
// least DepthCandidates·K documents go to the list stage, and the exact
// stage rescores K and a quarter more documents, and at least
// DepthExactValues·K full-precision values' worth. Measured at K=100 (the
// fusion depth; README, "At the depth fusion uses"): on SciFact 2048 and
// 128 (327 tokens of 384 values a document); Cranfield's shorter
// documents (213 tokens), coded against fewer centroids, needed about
// 196 exact for R@100 within 0.005.
const (
	DepthCandidates  = 20
	DepthExactValues = 160_000
)

// pairTablesFrom is the fewest listed tokens the list stage scores with
// byte tables (residualTables.withPairs): building them costs about as
// much as scoring some thousands of tokens.
const pairTablesFrom = 16384

// tablePool recycles the searches' centroid score tables.
var tablePool = sync.Pool{New: func() any { return new([]float32) }}

// depthCaps returns the candidate cap for K hits: the configured one,
// raised to DepthCandidates·K.
func depthCaps(k, candidates int) int {
	k = min(k, 1<<20)
	return max(candidates, k*DepthCandidates)
}

// minProbe is the fewest centroids a query token probes in this index:
// MinCentroidProbe, or one in MinProbeShare.
func (r *residualIndex) minProbe() int {
	return max(MinCentroidProbe, r.cb.nlist/MinProbeShare)
}

// withinBudget cuts each query token's probed centroids (best first) to
// the first whose lists hold, together, at least budget entries (all of
// them when they hold fewer), and never below minProbe: the cost
// of stage 2 and of the list stage grows with the entries probed, and
// lists grow with the collection, so a fixed count of centroids would
// cost more with every document added. A budget of at most 0 cuts
// nothing.
func (r *residualIndex) withinBudget(tops [][]int32, budget int) [][]int32 {
	if budget <= 0 {
		return tops
	}
	least := r.minProbe()
	for q, top := range tops {
		sum := 0
		for i, c := range top {
			sum += len(r.clists[c].docs)
			if sum >= budget && i+1 >= least {
				tops[q] = top[:i+1]
				break
			}
		}
	}
	return tops
}

// listEntryValues is about what the list stage costs per probed list
// entry, in token values of the exact stage: on a million documents of
// 128 tokens of 128 values, with 32 query tokens, the list stage took
// 3.6 ns of CPU per entry and the exact stage 2.1 ns per value (docs:
// latecollect README, "The centroid interaction for a missing query
// token, and fewer probes").
const listEntryValues = 2

// listStagePays reports whether the list stage, which reads every entry of
// the probed lists (tops), costs less than the exact stage would spend on
// the drop candidates it saves it from.
func (f *residualFamily) listStagePays(tops [][]int32, drop int) bool {
	return float64(drop)*f.valuesPerDocLocked() > float64(listEntryValues)*float64(f.rc.listed(tops))
}

// listed is the number of entries in the probed lists (tops), a list
// counted once per query token that probes it.
func (r *residualIndex) listed(tops [][]int32) int {
	n := 0
	for _, top := range tops {
		for _, c := range top {
			n += len(r.clists[c].docs)
		}
	}
	return n
}

// depthExactLocked is the fewest documents rescored exactly for K hits:
// K and a quarter more, and as many as hold DepthExactValues·K values at
// the index's mean document length.
func (f *residualFamily) depthExactLocked(k int) int {
	k = min(k, 1<<20)
	n := k + (k+3)/4 + 3
	if perDoc := f.valuesPerDocLocked(); perDoc > 0 {
		n = max(n, int(math.Ceil(float64(k)*DepthExactValues/perDoc)))
	}
	return n
}

// valuesPerDocLocked is the mean number of token values of a document the
// index holds, 0 when it holds none.
func (f *residualFamily) valuesPerDocLocked() float64 {
	r := f.rc
	if len(r.docs) == 0 || r.tokens == 0 {
		return 0
	}
	return float64(r.tokens) / float64(len(r.docs)) * float64(f.opts.Dim)
}

// exactCapLocked is the automatic ExactCap: the documents that make up
// ExactBudget token values at the mean document length, within
// [DefaultExactCandidates, MaxExactCandidates].
func (f *residualFamily) exactCapLocked() int {
	perDoc := f.valuesPerDocLocked()
	if perDoc == 0 {
		return DefaultExactCandidates
	}
	return min(MaxExactCandidates, max(DefaultExactCandidates, int(ExactBudget/perDoc)))
}

// probeLocked is stage 2: the documents listed under each query token's
// best centroids (tops), ranked by the sum over query tokens of the best
// probed centroid score they have, the best CandidateCap of them.
//
// From probeBucketFrom docnums on, probeBucketed sums each document once,
// in walk order, a bucket of docnums at a time. Below, and for sparse
// docnums, the query tokens are split in two halves, each summed into
// arrays (or a map) of its own, and the halves' sums added: in two
// goroutines when there are enough entries. Either way the sums do not
// depend on Parallelism, so neither does the ranking.
func (f *residualFamily) probeLocked(table []float32, stride int, tops [][]int32, so SearchOptions) []scored {
	r := f.rc
	listed := r.listed(tops)
	// Sums are kept per docnum in pooled arrays when docnums are dense
	// enough, in a map otherwise.
	n := int(r.maxNum) + 1
	dense := n <= 4*len(r.docs)+4096
	allow := newAllowSet(so.Allow, uint64(r.maxNum), !dense)
	defer allow.release()
	halves := min(2, len(tops))
	if halves == 0 {
		return nil
	}
	if !dense {
		var out []scored
		at := map[uint64]int{}
		for p := range halves {
			acc := newMapSums(min(listed, len(r.docs)))
			r.probeSum(acc, table, stride, tops, allow, len(tops)*p/halves, len(tops)*(p+1)/halves)
			for _, d := range acc.drain(nil) {
				if i, ok := at[d.num]; ok {
					out[i].score += d.score
				} else {
					at[d.num] = len(out)
					out = append(out, d)
				}
			}
		}
		return selectBest(out, so.CandidateCap)
	}
	parallel := f.opts.Parallelism > 1 && listed >= probeSplitFrom
	if n >= probeBucketFrom && (allow == nil || allow.bits != nil) {
		return r.probeBucketed(table, stride, tops, allow, n, so.CandidateCap, parallel)
	}
	return selectBest(r.probeDense(table, stride, tops, allow, n, parallel), so.CandidateCap)
}

// probeSum adds the documents listed under the probed centroids of query
// tokens [from, to) to acc.
func (r *residualIndex) probeSum(acc probeSums, table []float32, stride int, tops [][]int32, allow *allowSet, from, to int) {
	for q := from; q < to; q++ {
		for _, c := range tops[q] {
			s := table[int(c)*stride+q]
			prev := uint32(math.MaxUint32)
			for _, num := range r.clists[c].docs {
				// Centroids come best first, so the first is the
				// max; a document's entries are contiguous.
				if num != prev {
					acc.add(num, int32(q), s, allow)
					prev = num
				}
			}
		}
	}
}

// probeDense is stage 2 with the sums in arrays indexed by docnum (below
// n): every document found, in no particular order.
func (r *residualIndex) probeDense(table []float32, stride int, tops [][]int32, allow *allowSet, n int, parallel bool) []scored {
	halves := min(2, len(tops))
	if halves == 0 {
		return nil
	}
	accs := make([]*denseSums, halves)
	for p := range accs {
		accs[p] = denseSumsPool.Get().(*denseSums)
		accs[p].grow(n)
		defer denseSumsPool.Put(accs[p])
	}
	half := func(p, _, _ int) {
		r.probeSum(accs[p], table, stride, tops, allow, len(tops)*p/halves, len(tops)*(p+1)/halves)
	}
	if parallel {
		inParts(halves, halves, half)
	} else {
		for p := range halves {
			half(p, 0, 0)
		}
	}
	a := accs[0]
	for _, b := range accs[1:] {
		for _, num := range b.nums {
			x := &a.at[num]
			if x.last == 0 {
				a.nums = append(a.nums, num)
				x.last = 1
			}
			x.sum += b.at[num].sum
			b.at[num] = sumAt{}
		}
		b.nums = b.nums[:0]
	}
	return a.drain(nil)
}

// probeSplitFrom is the fewest list entries stage 2 splits over two
// goroutines.
const probeSplitFrom = 1 << 16

// bestFirst returns the best k of c (all of them if fewer), sorted by
// byScore. It selects before it sorts: stage 2 finds tens of thousands of
// documents in a large collection and keeps a thousand.
func bestFirst(c []scored, k int) []scored {
	c = selectBest(c, k)
	slices.SortFunc(c, byScore)
	return c
}

// selectBest returns the best k of c (all of them if fewer), in no
// particular order.
func selectBest(c []scored, k int) []scored {
	if k > 0 && len(c) >= sampleSelectFrom && k <= len(c)/16 {
		c = aboveSampled(c, k)
	}
	if len(c) > k {
		// Quickselect: c[:k] ends holding the k best (byScore is a strict
		// order, so which they are does not depend on the pivots).
		lo, hi := 0, len(c)
		for hi-lo > 1 {
			m := lo + (hi-lo)/2
			// Median of three as the pivot, moved to hi-1.
			if byScore(c[m], c[lo]) < 0 {
				c[m], c[lo] = c[lo], c[m]
			}
			if byScore(c[hi-1], c[lo]) < 0 {
				c[hi-1], c[lo] = c[lo], c[hi-1]
			}
			if byScore(c[m], c[hi-1]) < 0 {
				c[m], c[hi-1] = c[hi-1], c[m]
			}
			pivot := c[hi-1]
			i := lo
			for j := lo; j < hi-1; j++ {
				if byScore(c[j], pivot) < 0 {
					c[i], c[j] = c[j], c[i]
					i++
				}
			}
			c[i], c[hi-1] = c[hi-1], c[i]
			switch {
			case i == k || i == k-1:
				lo = hi // done: c[:k] are the best
			case i < k:
				lo = i + 1
			default:
				hi = i
			}
		}
		c = c[:k]
	}
	return c
}

// sampleSelectFrom is the fewest scores selectBest first cuts to those
// above a floor drawn from a sample (aboveSampled): stage 2 finds hundreds
// of thousands of documents in a million and keeps a thousand, and the
// quickselect's passes over them all cost more than the sums did.
const sampleSelectFrom = 1 << 14

// aboveSampled moves the scores of c at or above a floor to its front and
// returns them, when they are at least k; else it returns c. The floor is
// the score of rank 4·k·m/len(c)+8 among m = 1,024 scores spaced evenly
// in c: about 4·k scores reach it. The best k reach it whenever at least
// k do, so selectBest's answer does not depend on the sample.
func aboveSampled(c []scored, k int) []scored {
	const m = 1024
	var sample [m]float32
	step := len(c) / m
	for i := range sample {
		sample[i] = c[i*step].score
	}
	slices.Sort(sample[:])
	rank := min(m-1, 4*k*m/len(c)+8)
	floor := sample[m-1-rank]
	n := 0
	for i := range c {
		if c[i].score >= floor {
			c[n], c[i] = c[i], c[n]
			n++
		}
	}
	if n < k {
		return c
	}
	return c[:n]
}

// allowSet is a filter as stage 2 asks it, once for every list entry of
// a document it has not counted: a bit per docnum up to the index's
// largest, filled from the filter's bitmap once per search, where asking
// the bitmap itself (a search of its containers) made a 1% filter of a
// million documents slower than no filter (docs/evaluation.md). A nil set
// allows everything.
type allowSet struct {
	bits []uint64
	bm   *roaring64.Bitmap // instead of bits, when docnums are sparse
}

// allowBitsPool recycles the bits (128 KiB for a million documents).
var allowBitsPool sync.Pool

// newAllowSet returns the set of allow's docnums up to maxNum, nil for a
// nil allow; with sparse true (docnums far more than documents, as for
// mapSums) it asks the bitmap.
func newAllowSet(allow *roaring64.Bitmap, maxNum uint64, sparse bool) *allowSet {
	if allow == nil {
		return nil
	}
	if sparse {
		return &allowSet{bm: allow}
	}
	words := int(maxNum>>6) + 1
	var bits []uint64
	if p, ok := allowBitsPool.Get().(*[]uint64); ok && cap(*p) >= words {
		bits = (*p)[:words]
		clear(bits)
	} else {
		bits = make([]uint64, words)
	}
	var buf [256]uint64
	for it := allow.ManyIterator(); ; {
		n := it.NextMany(buf[:])
		if n == 0 {
			break
		}
		for _, num := range buf[:n] {
			if num > maxNum {
				return &allowSet{bits: bits} // ascending: the rest are past it too
			}
			bits[num>>6] |= 1 << (num & 63)
		}
	}
	return &allowSet{bits: bits}
}

// has reports whether num is allowed.
func (a *allowSet) has(num uint32) bool {
	if a == nil {
		return true
	}
	if a.bm != nil {
		return a.bm.Contains(uint64(num))
	}
	w := int(num >> 6)
	return w < len(a.bits) && a.bits[w]&(1<<(num&63)) != 0
}

// release returns the bits to the pool; a must not be used after.
func (a *allowSet) release() {
	if a != nil && a.bits != nil {
		allowBitsPool.Put(&a.bits)
	}
}

// probeSums accumulates stage 2's sums: add adds s to document num's sum
// unless query token q already added to it or allow excludes it; drain
// appends every document added to, with its sum, and forgets them.
type probeSums interface {
	add(num uint32, q int32, s float32, allow *allowSet)
	drain(out []scored) []scored
}

// denseSums indexes sums by docnum. A document's sum and the query token
// that last added to it plus one (0 for a document not added to since the
// last drain) share 8 bytes: stage 2 adds to documents in no order, and
// a million documents' sums are far more than the cache holds, so each
// add is a miss, one where separate arrays made two (at a million
// documents, half of a search's CPU was these adds).
type denseSums struct {
	at   []sumAt
	nums []uint32
}

type sumAt struct {
	sum  float32
	last int32
}

var denseSumsPool = sync.Pool{New: func() any { return new(denseSums) }}

func (d *denseSums) grow(n int) {
	if len(d.at) < n {
		d.at = make([]sumAt, n)
	}
}

func (d *denseSums) add(num uint32, q int32, s float32, allow *allowSet) {
	a := &d.at[num]
	switch a.last {
	case q + 1:
		return
	case 0:
		if !allow.has(num) {
			return
		}
		d.nums = append(d.nums, num)
	}
	a.last = q + 1
	a.sum += s
}

func (d *denseSums) drain(out []scored) []scored {
	for _, num := range d.nums {
		out = append(out, scored{num: uint64(num), score: d.at[num].sum})
		d.at[num] = sumAt{}
	}
	d.nums = d.nums[:0]
	return out
}

// mapSums keys sums by docnum.
type mapSums struct {
	slot map[uint32]int32
	sum  []float32
	last []int32
	nums []uint32
}

func newMapSums(n int) *mapSums {
	return &mapSums{slot: make(map[uint32]int32, n), sum: make([]float32, 0, n), last: make([]int32, 0, n), nums: make([]uint32, 0, n)}
}

func (m *mapSums) add(num uint32, q int32, s float32, allow *allowSet) {
	i, ok := m.slot[num]
	if !ok {
		if !allow.has(num) {
			return
		}
		i = int32(len(m.nums))
		m.slot[num] = i
		m.sum = append(m.sum, 0)
		m.last = append(m.last, -1)
		m.nums = append(m.nums, num)
	}
	if m.last[i] != q {
		m.last[i] = q
		m.sum[i] += s
	}
}

func (m *mapSums) drain(out []scored) []scored {
	for i, num := range m.nums {
		out = append(out, scored{num: uint64(num), score: m.sum[i]})
	}
	clear(m.slot)
	m.sum, m.last, m.nums = m.sum[:0], m.last[:0], m.nums[:0]
	return out
}

// topCentroids returns, for each query token q < nq, the n centroids
// with the best score table[c*stride+q], best first (ties by id). Each of
// at most workers goroutines reads a share of the table's rows, keeping
// every query token's best n at once; the shares' lists are then merged.
func topCentroids(table []float32, stride, nq, nlist, n, workers int) [][]int32 {
	if out, ok := topCentroidsSampled(table, stride, nq, nlist, n, workers); ok {
		return out
	}
	parts := max(1, min(workers, nlist/1024))
	tops := make([]topN, parts)
	inParts(nlist, parts, func(p, from, to int) {
		tops[p] = topCentroidsIn(table, stride, nq, from, to, n)
	})
	t := tops[0]
	for _, u := range tops[1:] {
		t = t.merge(u)
	}
	out := make([][]int32, nq)
	for q := range out {
		out[q] = t.ids[q*n : q*n+t.filled[q]]
	}
	return out
}

// topCentroidsSampled is topCentroids by a threshold per query token:
// the score of rank about 2n in a sample of the centroids (every
// step-th). One pass keeps every centroid at or above it, and each query
// token's kept ones are sorted (by score, then id, as topCentroids ranks
// them). A query token that kept fewer than n (the sample held more of
// its best centroids than a sample usually does: at 64 of 32,768, about
// one token in sixty) has its column ranked whole instead (topOfColumn).
// It reports false when the table is too small for sampling to pay. At
// most workers goroutines take a share of the query tokens each.
func topCentroidsSampled(table []float32, stride, nq, nlist, n, workers int) ([][]int32, bool) {
	step := nlist / estimateSample
	if step < 2 || n < 1 || n*8 > nlist {
		return nil, false
	}
	m := nlist / step
	rank := min(m, 2*n/step+2)
	out := make([][]int32, nq)
	ids := make([]int32, nq*n)
	// Query tokens go in groups of 8 lanes, the last one padded with
	// thresholds no score reaches; the table's stride is a multiple of 8.
	groups := (nq + 7) / 8
	inParts(groups, max(1, min(workers, groups)), func(_, gFrom, gTo int) {
		col := make([]float32, m)
		rows := make([]int32, nlist)
		kept := make([][]topEntry, 8)
		for j := range kept {
			kept[j] = make([]topEntry, 0, 4*n)
		}
		for g := gFrom; g < gTo; g++ {
			from, to := g*8, min(g*8+8, nq)
			var thr [8]float32
			for j := range thr {
				thr[j] = float32(math.Inf(1))
			}
			for j := range to - from {
				for i := range col {
					col[i] = table[i*step*stride+from+j]
				}
				thr[j] = nthSmallest(col, m-rank)
				kept[j] = kept[j][:0]
			}
			for _, c := range rows[:rowsAbove8(table[from:], stride, nlist, &thr, rows)] {
				row := table[int(c)*stride+from : int(c)*stride+to]
				for j, v := range row {
					if v >= thr[j] {
						kept[j] = append(kept[j], topEntry{v, c})
					}
				}
			}
			for j, k := range kept[:to-from] {
				q := from + j
				if len(k) < n {
					k = topOfColumn(table, stride, q, nlist, n, k[:0])
				}
				slices.SortFunc(k, byTopEntry)
				out[q] = ids[q*n : (q+1)*n]
				for i := range n {
					out[q][i] = k[i].c
				}
			}
		}
	})
	return out, true
}

// rowsAbove8 stores in out, in order, every row r < rows of which some
// lane j < 8 holds a value at least thr[j]: row r is table[r*stride:],
// and out holds rows values. It returns how many it stored.
func rowsAbove8(table []float32, stride, rows int, thr *[8]float32, out []int32) int {
	if rows <= 0 {
		return 0
	}
	_ = table[(rows-1)*stride+7]
	_ = out[rows-1]
	if useAVX2 {
		return rowsAbove8AVX2(&table[0], stride, rows, thr, &out[0])
	}
	n := 0
	for r := range rows {
		for j, v := range table[r*stride : r*stride+8] {
			if v >= thr[j] {
				out[n] = int32(r)
				n++
				break
			}
		}
	}
	return n
}

// topOfColumn appends to k every centroid whose score for query token q
// is at least the n-th best, in no order: n or more of them.
func topOfColumn(table []float32, stride, q, nlist, n int, k []topEntry) []topEntry {
	col := make([]float32, nlist)
	for c := range col {
		col[c] = table[c*stride+q]
	}
	thr := nthSmallest(col, nlist-n)
	for c := range nlist {
		if v := table[c*stride+q]; v >= thr {
			k = append(k, topEntry{v, int32(c)})
		}
	}
	return k
}

// topEntry is a centroid and its score against one query token.
type topEntry struct {
	v float32
	c int32
}

// byTopEntry orders by score, best first, then by id.
func byTopEntry(a, b topEntry) int {
	switch {
	case a.v > b.v:
		return -1
	case a.v < b.v:
		return 1
	}
	return cmp.Compare(a.c, b.c)
}

// topN holds, per query token q, its best filled[q] (at most n)
// centroids in ids[q*n:] and their scores in vals[q*n:], best first.
type topN struct {
	n      int
	ids    []int32
	vals   []float32
	filled []int
}

// topCentroidsIn is topCentroids over the rows [from, to).
func topCentroidsIn(table []float32, stride, nq, from, to, n int) topN {
	t := topN{n: n, ids: make([]int32, nq*n), vals: make([]float32, nq*n), filled: make([]int, nq)}
	for c := from; c < to; c++ {
		row := table[c*stride : c*stride+nq]
		for q, v := range row {
			k := t.filled[q]
			qv, qi := t.vals[q*n:(q+1)*n], t.ids[q*n:(q+1)*n]
			if k == n {
				// A later centroid of equal score loses on its id.
				if !(v > qv[n-1]) {
					continue
				}
				k = n - 1
			} else {
				t.filled[q]++
			}
			for k > 0 && v > qv[k-1] {
				qv[k], qi[k] = qv[k-1], qi[k-1]
				k--
			}
			qv[k], qi[k] = v, int32(c)
		}
	}
	return t
}

// merge returns the best n of t and u per query token, where every id of
// t is below every id of u: on equal scores t's come first.
func (t topN) merge(u topN) topN {
	n := t.n
	m := topN{n: n, ids: make([]int32, len(t.ids)), vals: make([]float32, len(t.vals)), filled: make([]int, len(t.filled))}
	for q := range t.filled {
		a, b, k := 0, 0, 0
		for ; k < n && (a < t.filled[q] || b < u.filled[q]); k++ {
			if b == u.filled[q] || (a < t.filled[q] && !(u.vals[q*n+b] > t.vals[q*n+a])) {
				m.ids[q*n+k], m.vals[q*n+k] = t.ids[q*n+a], t.vals[q*n+a]
				a++
			} else {
				m.ids[q*n+k], m.vals[q*n+k] = u.ids[q*n+b], u.vals[q*n+b]
				b++
			}
		}
		m.filled[q] = k
	}
	return m
}

// residualScratch is one worker's buffers for the residual stage.
type residualScratch struct {
	best, thr []float32
	max16     []int16
	keep      []int32
}

// exactScratch is one worker's buffers for exactScore, kept across the
// documents it scores: a blob is hundreds of kilobytes, and rows holds
// the block of it being scored (maxSimBlob). rd, opened at the first
// read, reads every blob the worker scores in one Badger transaction.
type exactScratch struct {
	blob []byte
	blobScratch
	best []float32
	rd   *storage.BlobReader
	k    *exactKernels // the search's query, ready for the kernels
}

// exactWorkers hands out the exact stage's scratches, one per worker,
// and closes their blob readers once the stage is done. k is the query
// made ready for the kernels once (newExactKernels), shared by the
// workers, which only read it.
type exactWorkers struct {
	k   *exactKernels
	mu  sync.Mutex
	all []*exactScratch
}

func (w *exactWorkers) scratch() *exactScratch {
	sc := &exactScratch{k: w.k}
	w.mu.Lock()
	w.all = append(w.all, sc)
	w.mu.Unlock()
	return sc
}

func (w *exactWorkers) close() {
	for _, sc := range w.all {
		if sc.rd != nil {
			sc.rd.Close()
		}
	}
}

// exactScore scores a document held from its stored tokens, as
// Exhaustive mode does, when the store's blob is the one its codes were
// made from (docCodes.matches). When it is not (the document changed or
// was deleted since: a change the index has not applied yet), the
// document is scored from its codes instead, as the index applied it,
// and so is one whose blob cannot be read (storage.ErrCorruption): the
// rest of the search goes on, and Stats counts both. Any other read error
// fails the search.
func (f *residualFamily) exactScore(query []float32, num uint64, s Scoring, sc *exactScratch) (float32, error) {
	d := f.rc.docs[num]
	if sc.rd == nil {
		rd, err := f.st.NewBlobReader()
		if err != nil {
			return 0, fmt.Errorf("latecollect: search: %w", err)
		}
		sc.rd = rd
	}
	blob, crc, ok, err := sc.rd.ReadBlobCRC(num, f.blob, sc.blob[:0])
	if ok && err == nil {
		sc.blob = blob
	}
	var e docEntry
	switch {
	case errors.Is(err, storage.ErrCorruption):
		f.exactReadErrors.Add(1)
		err = fmt.Errorf("latecollect: exact stage: read %s of document %d: %w", f.blob, num, err)
		f.exactReadErr.Store(&err)
		return f.codedScore(query, num, d, s, sc), nil
	case err != nil:
		return 0, fmt.Errorf("latecollect: search: read %s of document %d: %w", f.blob, num, err)
	case ok:
		if e, err = f.entryNoCopy(num, blob); err == nil && d.matches(len(blob), crc, e.h.count) {
			break
		}
		fallthrough
	default:
		f.exactStale.Add(1)
		return f.codedScore(query, num, d, s, sc), nil
	}
	nq := len(query) / f.opts.Dim
	if cap(sc.best) < nq {
		sc.best = make([]float32, nq)
	}
	scoreBlob(sc.k, e.blob, e.h, sc.best[:nq], &sc.blobScratch)
	return combine(s, sc.best[:nq]), nil
}

// codedScore scores document num (meta d) from its codes: each token
// decoded to its centroid plus its residual's reconstruction (the low or
// high value of each dimension), the vectors the residual stage scores,
// then scored as exactScore scores stored tokens, a block of rows at a
// time. Its codes are gathered from its centroids' lists.
func (f *residualFamily) codedScore(query []float32, num uint64, d docMeta, s Scoring, sc *exactScratch) float32 {
	cb := f.rc.cb
	dim, cbytes := cb.dim, cb.codeBytes()
	block := max(1, exactBlockBytes/(4*dim))
	if cap(sc.rows) < (block+laneTile)*dim {
		sc.rows = make([]float32, (block+laneTile)*dim)
	}
	ql := sc.k.ql
	nq := len(query) / dim
	if cap(sc.best) < nq {
		sc.best = make([]float32, nq)
	}
	best := sc.best[:nq]
	fillInf(best)
	cids, codes := f.rc.tokensOf(num, d, nil, nil)
	for from := 0; from < len(cids); from += block {
		to := min(len(cids), from+block)
		rows := sc.rows[:(to-from)*dim]
		for t := from; t < to; t++ {
			c := int(cids[t])
			cent := cb.cent[c*dim : (c+1)*dim]
			code := codes[t*cbytes : (t+1)*cbytes]
			row := rows[(t-from)*dim : (t-from+1)*dim]
			for j := range row {
				r := cb.lo[j]
				if code[j>>3]>>(j&7)&1 != 0 {
					r = cb.hi[j]
				}
				row[j] = cent[j] + r
			}
		}
		if ql != nil {
			ql.maxSimInto(rows, best, sc.rows[block*dim:cap(sc.rows)])
		} else {
			maxSimInto(query, rows, dim, nil, best)
		}
	}
	return combine(s, best)
}

// parallel calls fn(i, scratch) for i in [0, n) over at most
// Parallelism goroutines, each with its own scratch of scratchLen floats.
func (f *residualFamily) parallel(n int, fn func(i int, scratch []float32), scratchLen int) {
	parallelWith(f.opts.Parallelism, n, func() []float32 { return make([]float32, scratchLen) }, fn)
}

// parallelWith calls fn(i, scratch) for i in [0, n) over at most workers
// goroutines (fewer for small n), each with its own scratch from
// newScratch.
func parallelWith[S any](workers, n int, newScratch func() S, fn func(i int, scratch S)) {
	workers = max(1, min(workers, n/8))
	if workers == 1 {
		scratch := newScratch()
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
			scratch := newScratch()
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
// token q with centroid c, for q < nq, over at most workers goroutines,
// each taking a share of the centroids; the columns from nq to stride are
// left as they are (zero in a new table), or set to zero. With ql (the
// query laid out for the AVX-512 kernels) and a stride of its lanes
// (centroidStride), the products are the AVX-512 kernels' (about twice
// OpenBLAS's AVX2 kernels' speed: BenchmarkScoreCentroids); otherwise
// they are BLAS matrix products.
func scoreCentroids(query []float32, nq, dim int, cent []float32, stride int, table []float32, workers int, ql *queryLanes) error {
	nlist := len(cent) / dim
	parts := max(1, min(workers, nlist/1024))
	errs := make([]error, parts)
	lanes := ql != nil && nq <= 32 && stride == chunkLanes(nq)
	inParts(nlist, parts, func(p, lo, hi int) {
		if lanes {
			ql.dotInto(cent[lo*dim:hi*dim], table[lo*stride:hi*stride], stride)
			return
		}
		errs[p] = blas.MulT(cent[lo*dim:hi*dim], hi-lo, query, nq, dim, table[lo*stride:hi*stride], stride)
	})
	return errors.Join(errs...)
}

// useI8Centroids turns the int8 centroid scores off, for tests and
// benchmarks that compare them with the float ones.
var useI8Centroids = true

// i8Centroids reports whether a search of dimension dim scores the
// centroids in int8 (scoreCentroidsI8), given a query quantised for the
// VNNI kernels of at most 32 tokens.
func i8Centroids(dim int) bool { return useI8Centroids && useVNNI && dim%64 == 0 && dim <= 1040 }

// scoreCentroidsI8 is scoreCentroids in int8: the query tokens as the
// exact stage quantises them (qi, laid out for the VNNI kernels, at most
// 32 tokens), the centroids as assignment does (c), and table[c*stride+q]
// float32(<q8, c8>) times both scales (dotI8x32VNNI), for a stride of
// chunkLanes(nq). The table must have room for the rows up to nlist
// rounded up to 8, which the kernel writes. A quarter of the bytes of the
// float centroids are read, and VPDPBUSD makes four products where the
// float kernel makes one; the scores differ from the float ones by the
// two quantisations' error, as the exact stage's do.
func scoreCentroidsI8(qi *queryI8, c *centI8, stride int, table []float32, workers int) {
	var qscale [32]float32
	copy(qscale[:], qi.scale)
	groups := (c.k + 7) / 8
	parts := max(1, min(workers, c.k/1024))
	inParts(groups, parts, func(p, lo, hi int) {
		c.scores(qi.lanes, qscale[:], lo*8, min(hi*8, c.k), table[:cap(table)], stride)
	})
}

// centroidStride is the row stride of the centroid score table for nq
// query tokens: the lanes of the AVX-512 kernels' chunk when the query
// fits one (ql not nil, nq ≤ 32), otherwise nq rounded up to a multiple
// of 8 (the AVX2 kernels' width).
func centroidStride(nq int, ql *queryLanes) int {
	if ql != nil && nq <= 32 {
		return chunkLanes(nq)
	}
	return (nq + 7) &^ 7
}

// exhaustiveFromStoreLocked scores every allowed document the residual
// index holds exactly, from its stored tokens: the reference.
func (f *residualFamily) exhaustiveFromStoreLocked(ctx context.Context, query []float32, so SearchOptions) ([]Hit, error) {
	r := f.rc
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
	return f.rescore(ctx, query, nums, so)
}

// rescore scores the given documents of the residual index exactly from
// their stored tokens and keeps the best K.
func (f *residualFamily) rescore(ctx context.Context, query []float32, nums []uint64, so SearchOptions) ([]Hit, error) {
	hits := make([]Hit, len(nums))
	errs := make([]error, len(nums))
	workers := exactWorkers{k: newExactKernels(query, f.opts.Dim, newQueryLanes(query, f.opts.Dim), so.Mode)}
	defer workers.close()
	parallelWith(f.opts.Parallelism, len(nums), workers.scratch, func(i int, sc *exactScratch) {
		if ctx.Err() != nil {
			return
		}
		s, err := f.exactScore(query, nums[i], so.Scoring, sc)
		hits[i], errs[i] = Hit{DocNum: nums[i], Score: s}, err
	})
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
