//go:build cgo

package faiss

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// TestFlatScanMatchesFAISS checks the flat scan (OpenBLAS over FAISS's
// rows) against FAISS's own search of the same index: the same ids in the
// same order, scores to 1e-5, with and without a filter, for an index with
// ids (IDMap2) and after removals.
func TestFlatScanMatchesFAISS(t *testing.T) {
	const d, n, k = 48, 3000, 50
	r := rand.New(rand.NewPCG(5, 6))
	x, vecs, ids := randomFlat(t, r, d, n, 10) // sparse, increasing ids
	if _, err := x.Remove([]int64{ids[3], ids[500], ids[2999]}); err != nil {
		t.Fatal(err)
	}
	allow := roaring64.New()
	for _, id := range ids {
		if r.IntN(3) == 0 {
			allow.Add(uint64(id))
		}
	}
	allow.Add(uint64(ids[500])) // removed: must not come back
	for q := 0; q < 20; q++ {
		query := make([]float32, d)
		for i := range query {
			query[i] = float32(r.NormFloat64())
		}
		for _, filter := range []*roaring64.Bitmap{nil, allow} {
			x.mu.RLock()
			got, ok, err := x.searchFlatLocked(query, k, filter, 0)
			x.mu.RUnlock()
			if err != nil || !ok {
				t.Fatalf("flat scan: ok %v, %v", ok, err)
			}
			// FAISS's own search: two queries take the FAISS path.
			both, err := x.Search(context.Background(), append(append([]float32(nil), query...), query...), k, SearchOptions{Allow: filter})
			if err != nil {
				t.Fatal(err)
			}
			want := both[0]
			if len(got.IDs) != len(want.IDs) {
				t.Fatalf("query %d (filter %v): %d hits, FAISS %d", q, filter != nil, len(got.IDs), len(want.IDs))
			}
			for i := range got.IDs {
				if got.IDs[i] != want.IDs[i] || math.Abs(float64(got.Scores[i]-want.Scores[i])) > 1e-5 {
					t.Fatalf("query %d (filter %v) rank %d: %d (%v), FAISS %d (%v)", q, filter != nil, i, got.IDs[i], got.Scores[i], want.IDs[i], want.Scores[i])
				}
				if filter != nil && !filter.Contains(uint64(got.IDs[i])) {
					t.Fatalf("hit %d outside the filter", got.IDs[i])
				}
			}
		}
	}
	// Ties rank by smaller id, and k beyond the rows returns every row.
	y, err := New(2, "Flat", InnerProduct)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if err := y.Add([]int64{7, 3, 5}, []float32{1, 0, 1, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	res, err := y.Search(context.Background(), []float32{1, 0}, 10, SearchOptions{})
	if err != nil || len(res) != 1 || len(res[0].IDs) != 3 || res[0].IDs[0] != 3 || res[0].IDs[1] != 7 || res[0].IDs[2] != 5 {
		t.Fatalf("ties: %v, %v; want ids 3, 7 (score 1), then 5", res, err)
	}
	// Other indexes are not flat: FAISS searches them.
	z, err := New(d, "IVF4,Flat", InnerProduct)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	z.mu.RLock()
	_, ok, err := z.searchFlatLocked(vecs[:d], k, nil, 0)
	z.mu.RUnlock()
	if ok || err != nil {
		t.Fatalf("IVF index scanned as flat: %v %v", ok, err)
	}
}

// randomFlat returns a flat index of n random vectors of d values, closed
// when tb ends, with ids rising by 1 to gap (gap 1: ids 0 to n-1).
func randomFlat(tb testing.TB, r *rand.Rand, d, n, gap int) (*Index, []float32, []int64) {
	tb.Helper()
	x, err := New(d, "Flat", InnerProduct)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { x.Close() })
	vecs := make([]float32, n*d)
	for i := range vecs {
		vecs[i] = float32(r.NormFloat64())
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(gap * i)
		if gap > 1 {
			ids[i] += int64(r.IntN(gap))
		}
	}
	if err := x.Add(ids, vecs); err != nil {
		tb.Fatal(err)
	}
	return x, vecs, ids
}

func BenchmarkFlatSearch(b *testing.B) {
	const d, n = 384, 5000
	x, vecs, _ := randomFlat(b, rand.New(rand.NewPCG(1, 1)), d, n, 1)
	q := vecs[:d]
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, err := x.Search(context.Background(), q, 100, SearchOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("faiss", func(b *testing.B) {
		for b.Loop() {
			x.mu.RLock()
			_, _, err := x.mu.idx.Search(q, 100)
			x.mu.RUnlock()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
