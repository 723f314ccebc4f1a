package latecollect

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// Stage 2 in buckets finds the documents a walk of the probed lists in
// order finds, summed in one docnum-indexed array, with the same sums to
// the bit, whatever the filter, the number of query tokens and the
// parallelism; and the best k it keeps are the same, including a k that
// makes a worker cut what it keeps to a floor.
func TestProbeBucketedAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 9))
	const nlist = 64
	n := 5*probeBucket + 123
	r := &residualIndex{clists: make([]codeList, nlist)}
	for c := range r.clists {
		for range 2000 + rng.IntN(3000) {
			num := uint32(rng.IntN(n))
			// A document's entries are contiguous, sometimes several.
			for range 1 + rng.IntN(3) {
				r.clists[c].docs = append(r.clists[c].docs, num)
			}
		}
		slices.Sort(r.clists[c].docs) // lists are in docnum order
	}
	allow := roaring64.New()
	for num := range uint64(n) {
		if rng.IntN(10) == 0 {
			allow.Add(num)
		}
	}
	for _, nq := range []int{1, 7, 32} {
		table := make([]float32, nlist*nq)
		for i := range table {
			table[i] = float32(rng.NormFloat64())
		}
		tops := make([][]int32, nq)
		for q := range tops {
			perm := rng.Perm(nlist)[:1+rng.IntN(12)]
			for _, c := range perm {
				tops[q] = append(tops[q], int32(c))
			}
		}
		for _, filtered := range []bool{false, true} {
			var bm *roaring64.Bitmap
			if filtered {
				bm = allow
			}
			for _, parallel := range []bool{false, true} {
				set := newAllowSet(bm, uint64(n-1), false)
				// One sum per document, in the order of the walk.
				acc := &denseSums{}
				acc.grow(n)
				r.probeSum(acc, table, nq, tops, set, 0, nq)
				want := acc.drain(nil)
				got := r.probeBucketed(table, nq, tops, set, n, len(want)+1, parallel)
				byNum := func(a, b scored) int { return int(a.num) - int(b.num) }
				slices.SortFunc(want, byNum)
				slices.SortFunc(got, byNum)
				if len(got) != len(want) || len(want) == 0 {
					t.Fatalf("nq %d, filtered %v, parallel %v: %d documents, want %d", nq, filtered, parallel, len(got), len(want))
				}
				for i := range want {
					if got[i].num != want[i].num || math.Float32bits(got[i].score) != math.Float32bits(want[i].score) {
						t.Fatalf("nq %d, filtered %v, parallel %v: document %d sums %v, want document %d at %v",
							nq, filtered, parallel, got[i].num, got[i].score, want[i].num, want[i].score)
					}
					if filtered && !allow.Contains(got[i].num) {
						t.Fatalf("nq %d: document %d is not allowed", nq, got[i].num)
					}
				}
				for _, k := range []int{100, len(want) / 20} {
					best := bestFirst(slices.Clone(want), k)
					top := r.probeBucketed(table, nq, tops, set, n, k, parallel)
					slices.SortFunc(top, byScore)
					if !slices.Equal(top, best) {
						t.Fatalf("nq %d, filtered %v, parallel %v: the best %d differ", nq, filtered, parallel, k)
					}
				}
				set.release()
			}
		}
	}
}

// Stage 2 at a million documents: 32 query tokens probing 8 lists each of
// 3,900 ascending docnums (as at 32,768 centroids of 128M tokens), summed
// in docnum-indexed arrays and in buckets.
func BenchmarkProbe(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 46))
	const n, nq, probes, entries = 1_000_000, 32, 8, 3900
	r := &residualIndex{clists: make([]codeList, nq*probes)}
	for c := range r.clists {
		docs := make([]uint32, entries)
		for i := range docs {
			docs[i] = uint32(rng.IntN(n))
		}
		slices.Sort(docs)
		r.clists[c].docs = docs
	}
	table := make([]float32, len(r.clists)*nq)
	for i := range table {
		table[i] = float32(rng.NormFloat64())
	}
	tops := make([][]int32, nq)
	for q := range tops {
		for range probes {
			tops[q] = append(tops[q], int32(rng.IntN(len(r.clists))))
		}
	}
	for _, parallel := range []bool{false, true} {
		name := "serial"
		if parallel {
			name = "parallel"
		}
		b.Run("dense/"+name, func(b *testing.B) {
			for b.Loop() {
				selectBest(r.probeDense(table, nq, tops, nil, n, parallel), 1024)
			}
		})
		b.Run("buckets/"+name, func(b *testing.B) {
			for b.Loop() {
				r.probeBucketed(table, nq, tops, nil, n, 1024, parallel)
			}
		})
	}
}

// selectBest keeps the best k under byScore, whether its sampled floor
// cuts the scores first or, when fewer than k reach the floor (the sample
// holds the best scores and little else does), not: with ties, with the
// scores in order and shuffled.
func TestSelectBest(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 46))
	const n = 65536
	cases := map[string]func(i int) float32{
		"ties":     func(int) float32 { return float32(rng.IntN(50)) },
		"normal":   func(int) float32 { return float32(rng.NormFloat64()) },
		"ordered":  func(i int) float32 { return float32(i) },
		"reversed": func(i int) float32 { return float32(n - i) },
		// The sampled positions (every 64th) hold the best scores.
		"sampled": func(i int) float32 {
			if i%(n/1024) == 0 {
				return 1000 + float32(i)
			}
			return float32(rng.NormFloat64())
		},
	}
	for name, score := range cases {
		c := make([]scored, n)
		for i := range c {
			c[i] = scored{num: uint64(rng.IntN(1 << 30)), score: score(i)}
		}
		for _, k := range []int{1, 10, 100, 500, 4096} {
			want := slices.Clone(c)
			slices.SortFunc(want, byScore)
			want = want[:k]
			got := bestFirst(slices.Clone(c), k)
			if !slices.Equal(got, want) {
				t.Fatalf("%s, k %d: the best differ", name, k)
			}
		}
	}
}
