//go:build cgo

package faiss

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	gofaiss "github.com/blevesearch/go-faiss"
)

func newIndex(t *testing.T, c collection, desc string) *Index {
	t.Helper()
	x, err := New(testD, desc, InnerProduct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	if !x.IsTrained() {
		if err := x.Train(c.vecs); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Add(c.ids, c.vecs); err != nil {
		t.Fatal(err)
	}
	return x
}

// TestIndexFilteredSearch checks the wrapper's roaring-bitmap filter at
// several selectivities against brute force, on an exact index.
func TestIndexFilteredSearch(t *testing.T) {
	c := newCollection(21)
	x := newIndex(t, c, "Flat")
	if x.Description() != "IDMap2,Flat" {
		t.Fatalf("description %q, want the IDMap2 wrapper", x.Description())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, keep := range []float64{0.5, 0.05, 0.005, 0.0005} {
		allow := roaring64.New()
		for _, id := range c.ids {
			if rng.Float64() < keep {
				allow.Add(uint64(id))
			}
		}
		res, err := x.Search(context.Background(), c.queries, testK, SearchOptions{Allow: allow})
		if err != nil {
			t.Fatal(err)
		}
		pred := func(id int64) bool { return allow.Contains(uint64(id)) }
		for q, r := range res {
			want := bruteForce(c.vecs, c.ids, c.query(q), testK, gofaiss.MetricInnerProduct, pred)
			if len(r.IDs) != len(want) {
				t.Fatalf("keep %.4f: %d hits, want %d", keep, len(r.IDs), len(want))
			}
			checkExact(t, "filtered", r.Scores, r.IDs, want)
		}
	}
	res, err := x.Search(context.Background(), c.query(0), testK, SearchOptions{Allow: roaring64.New()})
	if err != nil || len(res) != 1 || len(res[0].IDs) != 0 {
		t.Fatalf("empty filter: %v %v", res, err)
	}
}

// TestIndexFilteredSearchShifted checks AllowShift: ids are a group number
// shifted left past a 4-bit position, the filter is a set of groups, and
// every index kind (the flat scan of one query, FAISS's own search of many,
// IVF with every list probed) returns what brute force over the allowed
// groups' ids returns.
func TestIndexFilteredSearchShifted(t *testing.T) {
	const shift = 4
	c := newCollection(23)
	for i := range c.ids {
		c.ids[i] = int64(i/3)<<shift | int64(i%3) // three vectors per group
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, desc := range []string{"Flat", "IVF32,Flat"} {
		x := newIndex(t, c, desc)
		for _, keep := range []float64{0.5, 0.05, 0.005} {
			groups := roaring64.New()
			for _, id := range c.ids {
				if rng.Float64() < keep {
					groups.Add(uint64(id) >> shift)
				}
			}
			pred := func(id int64) bool { return groups.Contains(uint64(id) >> shift) }
			opts := SearchOptions{Allow: groups, AllowShift: shift, NProbe: 32}
			for _, queries := range [][]float32{c.query(0), c.queries} {
				res, err := x.Search(context.Background(), queries, testK, opts)
				if err != nil {
					t.Fatalf("%s: %v", desc, err)
				}
				for q, r := range res {
					want := bruteForce(c.vecs, c.ids, queries[q*testD:(q+1)*testD], testK, gofaiss.MetricInnerProduct, pred)
					if len(r.IDs) != len(want) {
						t.Fatalf("%s, keep %.3f, %d queries: %d hits, want %d", desc, keep, len(res), len(r.IDs), len(want))
					}
					checkExact(t, desc+" shifted", r.Scores, r.IDs, want)
				}
			}
		}
	}
}

// TestIndexNProbe checks that NProbe reaches an IVF index: probing every
// list is exact.
func TestIndexNProbe(t *testing.T) {
	c := newCollection(22)
	x := newIndex(t, c, "IVF32,Flat")
	res, err := x.Search(context.Background(), c.queries, testK, SearchOptions{NProbe: 32})
	if err != nil {
		t.Fatal(err)
	}
	for q, r := range res {
		checkExact(t, "nprobe=nlist", r.Scores, r.IDs, bruteForce(c.vecs, c.ids, c.query(q), testK, gofaiss.MetricInnerProduct, nil))
	}
}

func TestIndexMarshalRemoveClose(t *testing.T) {
	c := newCollection(23)
	x := newIndex(t, c, "HNSW16")
	buf, err := x.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	y, err := Unmarshal(buf, x.Description(), InnerProduct)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := x.Search(context.Background(), c.queries, testK, SearchOptions{})
	b, _ := y.Search(context.Background(), c.queries, testK, SearchOptions{})
	for q := range a {
		if !slices.Equal(a[q].IDs, b[q].IDs) {
			t.Fatalf("query %d: loaded copy answers %v, original %v", q, b[q].IDs, a[q].IDs)
		}
	}
	if _, err := Unmarshal(buf, "", L2); err == nil {
		t.Fatal("loading an inner-product snapshot as L2 succeeded")
	}
	if err := y.Close(); err != nil {
		t.Fatal(err)
	}
	if err := y.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := y.Search(context.Background(), c.query(0), 1, SearchOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("search after close: %v, want ErrClosed", err)
	}

	flat := newIndex(t, c, "Flat")
	n, err := flat.Remove(c.ids[:100])
	if err != nil || n != 100 || flat.Len() != testN-100 {
		t.Fatalf("remove: n=%d len=%d err=%v", n, flat.Len(), err)
	}
	res, _ := flat.Search(context.Background(), c.vecs[:testD], 1, SearchOptions{})
	if len(res[0].IDs) == 1 && res[0].IDs[0] == c.ids[0] {
		t.Fatal("a removed vector was returned")
	}
}

func TestIndexBadInput(t *testing.T) {
	x, err := New(4, "Flat", InnerProduct)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx := context.Background()
	if err := x.Add([]int64{1}, []float32{1, 2, 3}); !errors.Is(err, ErrDimension) {
		t.Errorf("3 floats into d=4: %v, want ErrDimension", err)
	}
	if err := x.Add([]int64{1, 2}, []float32{1, 2, 3, 4}); err == nil {
		t.Error("2 ids for 1 vector accepted")
	}
	if err := x.Add([]int64{-1}, []float32{1, 2, 3, 4}); err == nil {
		t.Error("negative id accepted")
	}
	nan := float32(0)
	nan /= nan
	if err := x.Add([]int64{1}, []float32{1, nan, 3, 4}); err == nil {
		t.Error("NaN accepted")
	}
	if _, err := x.Search(ctx, nil, 1, SearchOptions{}); err == nil {
		t.Error("empty query accepted")
	}
	if _, err := x.Search(ctx, []float32{1, 2, 3, 4}, 0, SearchOptions{}); err == nil {
		t.Error("k=0 accepted")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := x.Search(cancelled, []float32{1, 2, 3, 4}, 1, SearchOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled search: %v", err)
	}
	if _, err := New(4, "NoSuchIndex", InnerProduct); err == nil {
		t.Error("bad description accepted")
	}
	if x.Len() != 0 {
		t.Errorf("rejected adds left %d vectors", x.Len())
	}
}

// TestIndexEfSearch checks that a wider HNSW search finds at least as many
// true neighbours, and that efSearch is refused for other index types.
func TestIndexEfSearch(t *testing.T) {
	c := newCollection(24)
	x := newIndex(t, c, "HNSW16")
	recall := func() float64 {
		res, err := x.Search(context.Background(), c.queries, testK, SearchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var r float64
		for q := range res {
			r += recallAt(res[q].IDs, bruteForce(c.vecs, c.ids, c.query(q), testK, gofaiss.MetricInnerProduct, nil))
		}
		return r / float64(len(res))
	}
	if err := x.SetEfSearch(8); err != nil {
		t.Fatal(err)
	}
	narrow := recall()
	if err := x.SetEfSearch(256); err != nil {
		t.Fatal(err)
	}
	wide := recall()
	t.Logf("HNSW16 recall@%d: efSearch 8 %.3f, 256 %.3f", testK, narrow, wide)
	if wide < 0.9 || wide < narrow {
		t.Fatalf("efSearch 256 recall %.3f (efSearch 8: %.3f)", wide, narrow)
	}
	flat := newIndex(t, c, "Flat")
	if err := flat.SetEfSearch(64); err == nil {
		t.Fatal("efSearch accepted on a flat index")
	}
}
