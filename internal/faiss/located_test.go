//go:build cgo

package faiss

import (
	"context"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// TestLocated keeps every vector's location from AddLocated and
// RemoveLocated, as dense does, and checks that the locations equal
// Locate's after every step; that SearchLocated over a set of ids scores
// exactly what an IVF search with every list probed and the same ids
// allowed does (the same scanner); that a stale location is refused; and
// that Locate works on an unmarshalled index.
func TestLocated(t *testing.T) {
	ctx := context.Background()
	for _, desc := range []string{"IVF8,Flat", "IVF8,SQ8"} {
		c := newCollection(31)
		x, err := New(testD, desc, InnerProduct)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		if err := x.Train(c.vecs); err != nil {
			t.Fatal(err)
		}
		if !x.IsIVF() {
			t.Fatalf("%s: not IVF", desc)
		}
		loc := map[int64]uint64{}
		set := func(id int64, lo uint64) { loc[id] = lo }
		half := len(c.ids) / 2
		for _, r := range [][2]int{{0, half}, {half, len(c.ids)}} {
			if err := x.AddLocated(c.ids[r[0]:r[1]], c.vecs[r[0]*testD:r[1]*testD], set); err != nil {
				t.Fatal(err)
			}
		}
		agree := func(what string) {
			t.Helper()
			all := map[int64]uint64{}
			if err := x.Locate(func(id int64, lo uint64) { all[id] = lo }); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(all, loc) {
				t.Fatalf("%s %s: %d locations kept, %d located, and they differ", desc, what, len(loc), len(all))
			}
		}
		agree("after adding")
		rng := rand.New(rand.NewPCG(5, 6))
		search := func(what string) {
			t.Helper()
			for _, keep := range []float64{0.5, 0.05, 0.001} {
				allow := roaring64.New()
				var ids []int64
				var los []uint64
				for id, lo := range loc {
					if rng.Float64() < keep {
						allow.Add(uint64(id))
						ids, los = append(ids, id), append(los, lo)
					}
				}
				for q := range 3 {
					got, err := x.SearchLocated(ctx, c.query(q), ids, los, testK)
					if err != nil {
						t.Fatal(err)
					}
					want, err := x.Search(ctx, c.query(q), testK, SearchOptions{Allow: allow, NProbe: 8})
					if err != nil {
						t.Fatal(err)
					}
					if len(got.IDs) != len(want[0].IDs) {
						t.Fatalf("%s %s keep %v: %d hits, want %d", desc, what, keep, len(got.IDs), len(want[0].IDs))
					}
					for i := range got.IDs {
						if got.Scores[i] != want[0].Scores[i] {
							t.Fatalf("%s %s keep %v hit %d: %d %v, want %d %v", desc, what, keep, i, got.IDs[i], got.Scores[i], want[0].IDs[i], want[0].Scores[i])
						}
					}
				}
			}
		}
		search("after adding")
		// Remove a third, in one call: some of them are the last of their
		// list, moved by an earlier removal of the same call.
		var rm []int64
		var rmLo []uint64
		for i, id := range c.ids {
			if i%3 == 0 {
				rm, rmLo = append(rm, id), append(rmLo, loc[id])
			}
		}
		n0 := x.Len()
		if err := x.RemoveLocated(rm, rmLo, set); err != nil {
			t.Fatal(err)
		}
		for _, id := range rm {
			delete(loc, id)
		}
		if x.Len() != n0-int64(len(rm)) {
			t.Fatalf("%s: %d vectors after removing %d of %d", desc, x.Len(), len(rm), n0)
		}
		agree("after removing")
		search("after removing")
		if err := x.RemoveLocated(rm[:1], rmLo[:1], set); err == nil {
			t.Fatalf("%s: removing at a stale location succeeded", desc)
		}
		buf, err := x.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		y, err := Unmarshal(buf, desc, InnerProduct)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := y.Locate(func(id int64, lo uint64) {
			if loc[id] != lo {
				t.Fatalf("%s: unmarshalled %d at %x, want %x", desc, id, lo, loc[id])
			}
			n++
		}); err != nil || n != len(loc) {
			t.Fatalf("%s: unmarshalled index located %d of %d (%v)", desc, n, len(loc), err)
		}
		y.Close()
	}
}
