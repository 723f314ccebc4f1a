package dense

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// topK returns the best k of scores (indexed like nums) among allowed.
func topK(scores []float32, nums []uint64, k int, allow *roaring64.Bitmap) []Hit {
	var hits []Hit
	for i, s := range scores {
		if allow == nil || allow.Contains(nums[i]) {
			hits = append(hits, Hit{DocNum: nums[i], Score: s})
		}
	}
	slices.SortFunc(hits, func(a, b Hit) int {
		if better(a, b) {
			return -1
		}
		return 1
	})
	return hits[:min(k, len(hits))]
}

// allScores is the float64 inner product of q with every vector.
func allScores(q []float32, vecs [][]float32) []float32 {
	out := make([]float32, len(vecs))
	for i, v := range vecs {
		var s float64
		for j := range v {
			s += float64(q[j]) * float64(v[j])
		}
		out[i] = float32(s)
	}
	return out
}

// randomFilter allows each of nums with probability frac.
func randomFilter(nums []uint64, frac float64, rng *rand.Rand) *roaring64.Bitmap {
	b := roaring64.New()
	for _, n := range nums {
		if rng.Float64() < frac {
			b.Add(n)
		}
	}
	return b
}

// regionFilter allows the fraction frac of nums whose vectors have the
// largest inner product with dir.
func regionFilter(dir []float32, vecs [][]float32, nums []uint64, frac float64) *roaring64.Bitmap {
	top := topK(allScores(dir, vecs), nums, int(frac*float64(len(nums))), nil)
	b := roaring64.New()
	for _, h := range top {
		b.Add(h.DocNum)
	}
	return b
}

// TestRecallDefaultANN checks acceptance criteria 2 and 3: with default
// options at 100k vectors the automatic index is IVF-SQ8 with locations,
// every score is the exact inner product (rescored), its recall@10 against
// exact search is at least 0.95, and under filters keeping 50%, 5%, 0.5%
// and 0.05% of the documents it returns only allowed documents with
// recall@10 at least 0.95 against exact filtered search. Under -short it
// runs at 20k vectors.
func TestRecallDefaultANN(t *testing.T) {
	n, nq := 100_000, 30
	if testing.Short() {
		n, nq = 20_000, 20
	}
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	s := newSynth(384, 100, 9)
	start := time.Now()
	vecs := s.many(n)
	nums := putVectors(t, st, 0, vecs)
	t.Logf("wrote %d vectors to storage in %v", n, time.Since(start))
	start = time.Now()
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 384})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	st0 := x.Stats()
	t.Logf("built %s over %d vectors in %v (%d bytes)", st0.Description, st0.Vectors, time.Since(start), st0.MemoryBytes)
	if !strings.HasPrefix(st0.Description, "IVF") || !strings.HasSuffix(st0.Description, ",SQ8") || x.mu.loc == nil || x.mu.loc.Len() != n {
		t.Fatalf("automatic index at %d vectors is %s (locations %v), want IVF-SQ8 with every vector's location", n, st0.Description, x.mu.loc)
	}
	pos := make(map[uint64]int, n)
	for i, num := range nums {
		pos[num] = i
	}
	rng := rand.New(rand.NewPCG(5, 5))
	fracs := []float64{1, 0.5, 0.05, 0.005, 0.0005}
	filters := make([]*roaring64.Bitmap, len(fracs))
	names := make([]string, len(fracs))
	for i, f := range fracs {
		names[i] = "random"
		if f < 1 {
			filters[i] = randomFilter(nums, f, rng)
		}
	}
	// Filters correlated with the vectors, like a category: the documents
	// furthest along a random direction. Their allowed documents sit in a
	// few IVF lists, often far from the query's.
	for _, f := range []float64{0.05, 0.005} {
		fracs = append(fracs, f)
		names = append(names, "region")
		filters = append(filters, regionFilter(s.next(), vecs, nums, f))
	}
	sum := make([]float64, len(fracs))
	for _, q := range s.many(nq) {
		scores := allScores(q, vecs)
		for i, allow := range filters {
			got, err := x.Search(ctx, q, 10, allow)
			if err != nil {
				t.Fatal(err)
			}
			want := topK(scores, nums, 10, allow)
			if len(got) != len(want) {
				t.Errorf("filter %.2f%%: %d hits, want %d", 100*fracs[i], len(got), len(want))
			}
			for _, h := range got {
				if allow != nil && !allow.Contains(h.DocNum) {
					t.Fatalf("filter %.2f%%: hit %d is not allowed", 100*fracs[i], h.DocNum)
				}
				// Rescored: the score is the stored vector's exact inner
				// product, not the quantised one.
				if d := math.Abs(float64(h.Score - scores[pos[h.DocNum]])); d > 1e-5 {
					t.Fatalf("filter %.2f%%: hit %d scores %v, its exact inner product is %v", 100*fracs[i], h.DocNum, h.Score, scores[pos[h.DocNum]])
				}
			}
			sum[i] += recall(got, want)
		}
	}
	for i, f := range fracs {
		r := sum[i] / float64(nq)
		card := n
		if filters[i] != nil {
			card = int(filters[i].GetCardinality())
		}
		t.Logf("%s filter %6.2f%% (%6d docs): recall@10 %.3f", names[i], 100*f, card, r)
		if r < 0.95 {
			t.Errorf("filter %.2f%%: recall@10 %.3f < 0.95", 100*f, r)
		}
	}
}
