package latecollect

import (
	"math"
	"slices"
	"sync"
)

// Stage 2 over buckets of docnums.
//
// Stage 2 adds each probed list entry to its document's sum. With a
// million documents the adds land anywhere in 8 MB of sums: each is a
// cache miss, and they were half of a search's CPU. probeBucketed sums
// one bucket of probeBucket docnums at a time, in an array that stays in
// the L2 cache: lists are in docnum order (codeList), so each probed list
// is read a bucket's stretch at a time, from a cursor that only moves
// forward. Within a bucket the lists are read in the order of the walk,
// query token by query token, so a document's sum is its query tokens'
// scores added in that order, whatever the buckets and the workers
// (TestProbeBucketedAgrees).
const (
	probeBucketShift = 14
	probeBucket      = 1 << probeBucketShift
	probeBucketMask  = probeBucket - 1
	// probeBucketFrom is the fewest docnums summed in buckets: below it
	// denseSums' arrays fit the cache anyway.
	probeBucketFrom = 4 * probeBucket
)

// probeBuckets is the pooled memory of probeBucketed: the probed lists,
// and each worker's sums.
type probeBuckets struct {
	lists probedLists
	sum   [2]bucketSums
}

// probedLists are the lists a search probes, in the order of the walk:
// per list, its docnums, the query token that probed it (plus one) and
// its centroid's score.
type probedLists struct {
	docs  [][]uint32
	q     []int32
	score []float32
}

// bucketSums is one worker's sums over one bucket (as denseSums, indexed
// by the docnum's low bits), with the documents added to, each list's
// cursor, and the documents the worker keeps.
type bucketSums struct {
	at   []sumAt
	nums []uint16
	pos  []int
	out  []scored
}

var probeBucketsPool = sync.Pool{New: func() any { return new(probeBuckets) }}

// probeBucketed is stage 2 for dense docnums below n: every allowed
// document listed under a query token's probed centroids (tops, best
// first), with the sum over query tokens of the first (best) probed
// centroid score it has, added in query token order. It returns the best
// k of them (selectBest), in no particular order. allow is nil or
// newAllowSet's bits (the dense form). With parallel, two goroutines sum
// half the buckets each.
//
// A worker keeps only documents that can still be among the best k: once
// it has found 8k, it cuts them to its best k, whose least score is a
// floor that only rises, and keeps no document below it.
func (r *residualIndex) probeBucketed(table []float32, stride int, tops [][]int32, allow *allowSet, n, k int, parallel bool) []scored {
	if len(tops) == 0 || k <= 0 {
		return nil
	}
	nb := (n + probeBucket - 1) >> probeBucketShift
	pb := probeBucketsPool.Get().(*probeBuckets)
	pl := &pb.lists
	defer func() {
		clear(pl.docs) // the pool must not keep the index's lists alive
		probeBucketsPool.Put(pb)
	}()
	pl.docs, pl.q, pl.score = pl.docs[:0], pl.q[:0], pl.score[:0]
	for q, top := range tops {
		for _, c := range top {
			pl.docs = append(pl.docs, r.clists[c].docs)
			pl.q = append(pl.q, int32(q)+1)
			pl.score = append(pl.score, table[int(c)*stride+q])
		}
	}
	parts := 1
	if parallel {
		parts = min(2, nb)
	}
	var bits []uint64
	if allow != nil {
		bits = allow.bits
	}
	inParts(nb, parts, func(w, from, to int) {
		s := &pb.sum[w]
		if len(s.at) < probeBucket {
			s.at = make([]sumAt, probeBucket)
			s.nums = make([]uint16, probeBucket)
		}
		s.out = s.out[:0]
		// Each list's cursor at the worker's first docnum.
		first := uint32(from) << probeBucketShift
		s.pos = s.pos[:0]
		for _, docs := range pl.docs {
			i := 0
			if first > 0 {
				i, _ = slices.BinarySearch(docs, first)
			}
			s.pos = append(s.pos, i)
		}
		floor := float32(math.Inf(-1))
		at, nums, pos := s.at, s.nums[:probeBucket], s.pos
		for b := from; b < to; b++ {
			end := uint64(b+1) << probeBucketShift
			found := 0
			for i, docs := range pl.docs {
				q, score := pl.q[i], pl.score[i]
				j := pos[i]
				if bits == nil {
					for ; j < len(docs) && uint64(docs[j]) < end; j++ {
						found = addBucket(at, nums, found, docs[j]&probeBucketMask, q, score)
					}
				} else {
					for ; j < len(docs) && uint64(docs[j]) < end; j++ {
						// Past disallowed documents: a filter that allows
						// few makes this branch predictable, and the
						// search cheaper than an unfiltered one.
						if num := docs[j]; bits[num>>6]&(1<<(num&63)) != 0 {
							found = addBucket(at, nums, found, num&probeBucketMask, q, score)
						}
					}
				}
				pos[i] = j
			}
			base := uint64(b) << probeBucketShift
			for _, lo := range nums[:found] {
				a := &at[lo]
				if sum := a.sum; sum >= floor {
					s.out = append(s.out, scored{num: base | uint64(lo), score: sum})
				}
				*a = sumAt{}
			}
			if len(s.out) >= 8*k {
				s.out = selectBest(s.out, k)
				floor = s.out[0].score
				for _, c := range s.out[1:] {
					floor = min(floor, c.score)
				}
			}
		}
	})
	all := pb.sum[0].out
	if parts > 1 {
		all = append(all, pb.sum[1].out...)
		pb.sum[0].out = all
	}
	return append([]scored(nil), selectBest(all, k)...)
}

// addBucket adds query token q's (plus one) score to the document at lo
// of a bucket's sums unless q added to it already, recording the
// document in nums[found] when it is new to the bucket, and returns the
// documents found. Without branches: whether a document is new, and
// whether its query token added to it already (through a better
// centroid, or another token of the document in the same list), follow
// no pattern the CPU could predict. Only a token's first, best, centroid
// counts.
func addBucket(at []sumAt, nums []uint16, found int, lo uint32, q int32, score float32) int {
	a := &at[lo]
	last, v := a.last, score
	if last == q {
		v = 0
	}
	nums[found] = uint16(lo)
	a.last = q
	a.sum += v
	return found + int(uint32(last-1)>>31) // last == 0: a new document
}
