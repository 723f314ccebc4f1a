package latecollect

import (
	"math"
	"sync"
)

// Stage 2 over buckets of docnums.
//
// Stage 2 adds each probed list entry to its document's sum. Lists hold
// documents in no order that matters here, so with a million documents
// the adds land anywhere in 8 MB of sums: each is a cache miss, and they
// were half of a search's CPU. probeBucketed first copies the entries,
// in probe order, into buckets of probeBucket docnums (a write stream per
// bucket), then sums each bucket in arrays that stay in the L2 cache.
// Within a bucket the entries keep the order of the walk, so every
// document's sums are the ones denseSums gives, added in the same order:
// the two find the same candidates with the same scores
// (TestProbeBucketedAgrees).
const (
	probeBucketShift = 14
	probeBucket      = 1 << probeBucketShift
	probeBucketMask  = probeBucket - 1
	// probeBucketFrom is the fewest docnums summed in buckets: below it
	// denseSums' arrays fit the cache anyway.
	probeBucketFrom = 4 * probeBucket
	// maxBucketProbes bounds the probed lists of one half of the query
	// tokens: an entry holds the list's index in the bits above its
	// docnum's in the bucket.
	maxBucketProbes = 1 << (32 - probeBucketShift)
)

// probeBuckets is the pooled memory of probeBucketed.
type probeBuckets struct {
	half [2]bucketHalf
	sum  [2]bucketSums
}

// bucketHalf holds one half of the query tokens' entries: per bucket, the
// docnum's low bits and the index of the list it was found in; per list,
// the query token that probed it and its centroid's score.
type bucketHalf struct {
	ents  [][]uint32
	q     []int32
	score []float32
}

// bucketSums is one worker's sums over one bucket, per half (as
// denseSums, indexed by the docnum's low bits), with the documents each
// half added to, and the documents the worker found.
type bucketSums struct {
	at   [2][]sumAt
	nums [2][]uint16
	out  []scored
}

var probeBucketsPool = sync.Pool{New: func() any { return new(probeBuckets) }}

// bucketHalves reports whether probeBucketed can take these probes: each
// half of the query tokens probes fewer than maxBucketProbes lists.
func bucketHalves(tops [][]int32) bool {
	halves := min(2, len(tops))
	for p := range halves {
		n := 0
		for _, top := range tops[len(tops)*p/halves : len(tops)*(p+1)/halves] {
			n += len(top)
		}
		if n >= maxBucketProbes {
			return false
		}
	}
	return true
}

// probeBucketed is stage 2 for dense docnums below n, as probeLocked's
// denseSums path computes it: every allowed document listed under a
// query token's probed centroids (tops, best first), with the sum over
// query tokens of the first (best) probed centroid score it has, the sums
// of the two halves of the query tokens added. It returns the best k of
// them (selectBest), in no particular order. bucketHalves(tops) must
// hold, and allow is nil or newAllowSet's bits (the dense form). With
// parallel, the halves are copied, and the buckets summed, in two
// goroutines.
func (r *residualIndex) probeBucketed(table []float32, stride int, tops [][]int32, allow *allowSet, n, k int, parallel bool) []scored {
	halves := min(2, len(tops))
	if halves == 0 {
		return nil
	}
	nb := (n + probeBucket - 1) >> probeBucketShift
	pb := probeBucketsPool.Get().(*probeBuckets)
	defer probeBucketsPool.Put(pb)
	for p := range pb.half {
		h := &pb.half[p]
		if len(h.ents) < nb {
			h.ents = append(h.ents, make([][]uint32, nb-len(h.ents))...)
		}
		for b := range h.ents {
			h.ents[b] = h.ents[b][:0]
		}
		h.q, h.score = h.q[:0], h.score[:0]
	}
	parts := 1
	if parallel {
		parts = 2
	}
	inParts(halves, min(parts, halves), func(_, from, to int) {
		for p := from; p < to; p++ {
			h := &pb.half[p]
			ents := h.ents[:nb]
			for q := len(tops) * p / halves; q < len(tops)*(p+1)/halves; q++ {
				for _, c := range tops[q] {
					li := uint32(len(h.q)) << probeBucketShift
					h.q = append(h.q, int32(q)+1)
					h.score = append(h.score, table[int(c)*stride+q])
					// A document's entries are contiguous, and only the
					// first counts (centroids come best first).
					prev := uint32(math.MaxUint32)
					docs := r.clists[c].docs
					if allow == nil {
						for _, num := range docs {
							if num != prev {
								prev = num
								b := num >> probeBucketShift
								ents[b] = append(ents[b], li|num&probeBucketMask)
							}
						}
						continue
					}
					bits := allow.bits
					for _, num := range docs {
						if num != prev {
							prev = num
							if w := int(num >> 6); w < len(bits) && bits[w]&(1<<(num&63)) != 0 {
								b := num >> probeBucketShift
								ents[b] = append(ents[b], li|num&probeBucketMask)
							}
						}
					}
				}
			}
		}
	})
	inParts(nb, parts, func(w, from, to int) {
		s := &pb.sum[w]
		for p := range s.at {
			if len(s.at[p]) < probeBucket {
				s.at[p] = make([]sumAt, probeBucket)
				s.nums[p] = make([]uint16, probeBucket)
			}
		}
		s.out = s.out[:0]
		for b := from; b < to; b++ {
			for p := range halves {
				h, at, nums := &pb.half[p], s.at[p], s.nums[p][:probeBucket]
				qs, scores := h.q, h.score
				// Without branches: whether a document is new to the
				// half, and whether the query token already added to it,
				// follow no pattern the CPU could predict.
				k := 0
				for _, e := range h.ents[b] {
					i := e >> probeBucketShift
					lo := e & probeBucketMask
					a := &at[lo]
					last, q, v := a.last, qs[i], scores[i]
					if last == q {
						v = 0
					}
					nums[k] = uint16(lo)
					k += int(uint32(last-1) >> 31) // last == 0: a new document
					a.last = q
					a.sum += v
				}
				s.nums[p] = nums[:k]
			}
			// The halves' sums added as probeLocked adds them: the first
			// half's, plus the second's.
			base := uint64(b) << probeBucketShift
			first, second := s.at[0], s.at[1]
			for _, lo := range s.nums[0] {
				sum := first[lo].sum
				if y := &second[lo]; y.last != 0 {
					sum += y.sum
					*y = sumAt{}
				}
				first[lo] = sumAt{}
				s.out = append(s.out, scored{num: base | uint64(lo), score: sum})
			}
			for _, lo := range s.nums[1] {
				if y := &second[lo]; y.last != 0 {
					s.out = append(s.out, scored{num: base | uint64(lo), score: 0 + y.sum})
					*y = sumAt{}
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
