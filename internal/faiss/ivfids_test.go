//go:build cgo

package faiss

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// TestSearchIDs checks that scoring a set of ids through the direct map
// gives what an IVF search with every list probed and the same ids
// allowed gives (the same scanner, so the same scores), for raw and
// quantised lists; that removal through the direct map removes exactly
// the ids asked; and that the map survives Marshal.
func TestSearchIDs(t *testing.T) {
	c := newCollection(31)
	ctx := context.Background()
	for _, desc := range []string{"IVF8,Flat", "IVF8,SQ8"} {
		x := newIndex(t, c, desc)
		if x.HasDirectMap() {
			t.Fatalf("%s: a direct map before SetDirectMap", desc)
		}
		if _, err := x.SearchIDs(ctx, c.query(0), []int64{c.ids[0]}, 5); err == nil {
			t.Fatalf("%s: SearchIDs without a direct map succeeded", desc)
		}
		if err := x.SetDirectMap(); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 6))
		check := func(what string) {
			t.Helper()
			for _, keep := range []float64{0.5, 0.05, 0.01} {
				allow := roaring64.New()
				var ids []int64
				for _, id := range c.ids {
					if rng.Float64() < keep {
						allow.Add(uint64(id))
						ids = append(ids, id)
					}
				}
				ids = append(ids, 1<<40) // absent: skipped
				for q := range 3 {
					got, err := x.SearchIDs(ctx, c.query(q), ids, testK)
					if err != nil {
						t.Fatal(err)
					}
					want, err := x.Search(ctx, c.query(q), testK, SearchOptions{Allow: allow, NProbe: 8})
					if err != nil {
						t.Fatal(err)
					}
					if len(got.IDs) != len(want[0].IDs) {
						t.Fatalf("%s %s keep %.2f: %d hits, want %d", desc, what, keep, len(got.IDs), len(want[0].IDs))
					}
					for i := range got.IDs {
						if got.Scores[i] != want[0].Scores[i] {
							t.Fatalf("%s %s keep %.2f hit %d: %d %v, want %d %v", desc, what, keep, i, got.IDs[i], got.Scores[i], want[0].IDs[i], want[0].Scores[i])
						}
					}
				}
			}
		}
		// One id touches one of the 8 lists: its centroid is scored alone,
		// not with all the others at once.
		one, err := x.SearchIDs(ctx, c.query(1), c.ids[7:8], testK)
		if err != nil {
			t.Fatal(err)
		}
		full, err := x.Search(ctx, c.query(1), testK, SearchOptions{Allow: roaring64.BitmapOf(uint64(c.ids[7])), NProbe: 8})
		if err != nil || len(one.IDs) != 1 || len(full[0].IDs) != 1 || one.Scores[0] != full[0].Scores[0] {
			t.Fatalf("%s: one id: %v, want %v (%v)", desc, one, full, err)
		}
		check("after adding")
		n0 := x.Len()
		removed, err := x.Remove(append(append([]int64{}, c.ids[:50]...), 1<<40))
		if err != nil || removed != 50 || x.Len() != n0-50 {
			t.Fatalf("%s: removed %d (%v), len %d, want 50 and %d", desc, removed, err, x.Len(), n0-50)
		}
		res, err := x.SearchIDs(ctx, c.query(0), c.ids[:50], testK)
		if err != nil || len(res.IDs) != 0 {
			t.Fatalf("%s: removed ids found: %v %v", desc, res, err)
		}
		c.ids, c.vecs = c.ids[50:], c.vecs[50*testD:]
		check("after removing")
		buf, err := x.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		y, err := Unmarshal(buf, desc, InnerProduct)
		if err != nil {
			t.Fatal(err)
		}
		if !y.HasDirectMap() {
			t.Fatalf("%s: the direct map did not survive Marshal", desc)
		}
		y.Close()
		c = newCollection(31)
	}
}
