package dense

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/storage"
)

const testModel = "m"

// synth generates L2-normalised d-dimensional vectors shaped like
// embeddings: a random one of nc cluster centres plus a point of a shared
// random subspace of intrinsic dimension 32, plus a little isotropic
// noise. Real embeddings are low-dimensional in this sense. Uniform random
// vectors in 384 dimensions would be a degenerate benchmark: every vector
// is almost equally far from every other, so neighbours mean nothing and
// no ANN index can do better than a scan.
type synth struct {
	d, m    int
	noise   float64 // weight of the subspace component against the centre
	centres [][]float32
	basis   [][]float32 // m random directions
	rng     *rand.Rand
}

func newSynth(d, nc int, seed uint64) *synth {
	s := &synth{d: d, m: min(32, d), noise: 1, rng: rand.New(rand.NewPCG(seed, 42))}
	for range nc {
		s.centres = append(s.centres, s.gauss(1))
	}
	for range s.m {
		s.basis = append(s.basis, s.gauss(1))
	}
	return s
}

// gauss returns a random vector of expected norm about scale.
func (s *synth) gauss(scale float64) []float32 {
	v := make([]float32, s.d)
	sd := scale / math.Sqrt(float64(s.d))
	for i := range v {
		v[i] = float32(s.rng.NormFloat64() * sd)
	}
	return v
}

func (s *synth) next() []float32 {
	c := s.centres[s.rng.IntN(len(s.centres))]
	v := s.gauss(0.1)
	sd := s.noise / math.Sqrt(float64(s.m))
	for _, b := range s.basis {
		z := float32(s.rng.NormFloat64() * sd)
		for i := range v {
			v[i] += z * b[i]
		}
	}
	for i := range v {
		v[i] += c[i]
	}
	return normalise(v)
}

func (s *synth) many(n int) [][]float32 {
	out := make([][]float32, n)
	for i := range out {
		out[i] = s.next()
	}
	return out
}

func normalise(v []float32) []float32 {
	var n float64
	for _, f := range v {
		n += float64(f) * float64(f)
	}
	n = math.Sqrt(n)
	for i := range v {
		v[i] = float32(float64(v[i]) / n)
	}
	return v
}

func openStore(t testing.TB, dir string) *storage.Store {
	t.Helper()
	st, err := storage.Open(dir, &storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func docID(i int) string { return fmt.Sprintf("d%07d", i) }

// putVectors writes vecs as documents docID(first+i) with their vector
// blobs, in batches, and returns their docnums.
func putVectors(t testing.TB, st *storage.Store, first int, vecs [][]float32) []uint64 {
	t.Helper()
	ctx := context.Background()
	// 500 vectors of 384 floats (and their documents) stay within one
	// transaction of the default 16 MiB memtable (about 2.4 MB).
	const batch = 500
	for lo := 0; lo < len(vecs); lo += batch {
		var b storage.Batch
		for i := lo; i < min(lo+batch, len(vecs)); i++ {
			b.Put(tandem.Doc{ID: docID(first + i), Fields: map[string]any{"text": "x"}},
				map[string][]byte{BlobName(testModel): EncodeVector(vecs[i])})
		}
		if _, err := st.Write(ctx, &b); err != nil {
			t.Fatal(err)
		}
	}
	nums := make([]uint64, len(vecs))
	for i := range vecs {
		n, ok, err := st.Lookup(docID(first + i))
		if err != nil || !ok {
			t.Fatalf("lookup %s: %v %v", docID(first+i), ok, err)
		}
		nums[i] = n
	}
	return nums
}

// catchUp applies every change after the index's AppliedSeq, as the
// engine does after each write.
func catchUp(t testing.TB, st *storage.Store, x *Index) {
	t.Helper()
	ctx := context.Background()
	for {
		ch, err := st.Changes(ctx, x.AppliedSeq(), 5000)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch) == 0 {
			return
		}
		if err := x.Apply(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
}

// bruteForce is the reference: exact top k by inner product computed in
// float64 over vecs (indexed by position, reported as nums[i]).
func bruteForce(q []float32, vecs [][]float32, nums []uint64, k int, allow *roaring64.Bitmap) []Hit {
	var hits []Hit
	for i, v := range vecs {
		if v == nil || (allow != nil && !allow.Contains(nums[i])) {
			continue
		}
		var s float64
		for j := range v {
			s += float64(q[j]) * float64(v[j])
		}
		hits = append(hits, Hit{DocNum: nums[i], Score: float32(s)})
	}
	slices.SortFunc(hits, func(a, b Hit) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
	return hits[:min(k, len(hits))]
}

// recall is |got ∩ want| / |want|.
func recall(got, want []Hit) float64 {
	if len(want) == 0 {
		return 1
	}
	set := map[uint64]bool{}
	for _, h := range want {
		set[h.DocNum] = true
	}
	n := 0
	for _, h := range got {
		if set[h.DocNum] {
			n++
		}
	}
	return float64(n) / float64(len(want))
}

// sameRanking reports whether got matches want position by position,
// tolerating swaps of hits whose scores differ by less than eps.
func sameRanking(got, want []Hit, eps float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d hits, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].DocNum != want[i].DocNum && math.Abs(float64(got[i].Score-want[i].Score)) > float64(eps) {
			return fmt.Errorf("rank %d: doc %d (%.6f), want doc %d (%.6f)", i, got[i].DocNum, got[i].Score, want[i].DocNum, want[i].Score)
		}
		if math.Abs(float64(got[i].Score-want[i].Score)) > float64(eps) {
			return fmt.Errorf("rank %d: score %.6f, want %.6f", i, got[i].Score, want[i].Score)
		}
	}
	return nil
}
