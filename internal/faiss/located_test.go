//go:build cgo

package faiss

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// TestLocated keeps every vector's location from AddLocated and
// RemoveLocated, as dense does, and checks that the locations equal
// Locate's after every step; that SearchLocated over a set of ids scores
// what an IVF search with every list probed (or as many as it is told) and
// the same ids allowed does
// (exactly with the index's own scanner, to float rounding with the 8-bit
// kernel), on one thread or several, skipping ids without a location;
// that a stale location is refused; and that Locate works on an
// unmarshalled index.
func TestLocated(t *testing.T) {
	ctx := context.Background()
	for _, desc := range []string{"IVF8,Flat", "IVF64,SQ8", "IVF8,SQ4"} {
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
			locs := &Locations{}
			defer locs.Close()
			for id, lo := range loc {
				locs.Set(uint64(id), lo)
			}
			// 10,000 vectors: half of them are scored on several threads.
			for _, keep := range []float64{0.5, 0.05, 0.001} {
				allow := roaring64.New()
				for id := range loc {
					if rng.Float64() < keep {
						allow.Add(uint64(id))
					}
				}
				// Ids without a vector are skipped.
				passed := allow.Clone()
				for range 20 {
					passed.Add(uint64(3*testN + rng.IntN(testN)))
				}
				for q := range 6 {
					// Every list, or (queries 3 to 5) the nearest 1, 3 or
					// 5: the candidates of an IVF search probing as many.
					nprobe := []int{0, 0, 0, 1, 3, 5}[q]
					got, err := x.SearchLocated(ctx, c.query(q), passed.ToArray(), locs, testK, nprobe)
					if err != nil {
						t.Fatal(err)
					}
					probes := nprobe
					if probes == 0 {
						probes = 64 // every list
					}
					want, err := x.Search(ctx, c.query(q), testK, SearchOptions{Allow: allow, NProbe: probes})
					if err != nil {
						t.Fatal(err)
					}
					if len(got.IDs) != len(want[0].IDs) {
						t.Fatalf("%s %s keep %v: %d hits, want %d", desc, what, keep, len(got.IDs), len(want[0].IDs))
					}
					for i := range got.IDs {
						w := want[0].Scores[i]
						tol := float32(0)
						if strings.HasSuffix(desc, "SQ8") {
							tol = 1e-5 * max(1, abs32(w))
						}
						if got.IDs[i] != want[0].IDs[i] || abs32(got.Scores[i]-w) > tol {
							t.Fatalf("%s %s keep %v hit %d: %d %v, want %d %v", desc, what, keep, i, got.IDs[i], got.Scores[i], want[0].IDs[i], w)
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
		stale := &Locations{}
		stale.Set(uint64(rm[0]), rmLo[0]|0xffff) // far past its list's end
		if _, err := x.SearchLocated(ctx, c.query(0), []uint64{uint64(rm[0])}, stale, testK, 0); err == nil || !strings.Contains(err.Error(), "out of date") {
			t.Fatalf("%s: searching at a stale location: %v", desc, err)
		}
		stale.Close()
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

func abs32(v float32) float32 { return float32(math.Abs(float64(v))) }

// TestDotU8 compares both 8-bit kernels with a float64 inner product, for
// lengths around the AVX2 kernel's 16-wide steps.
func TestDotU8(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for d := 1; d <= 70; d++ {
		w := make([]float32, d)
		c := make([]byte, d)
		var want float64
		for j := range d {
			w[j] = float32(rng.NormFloat64())
			c[j] = byte(rng.IntN(256))
			want += float64(w[j]) * float64(c[j])
		}
		for _, portable := range []bool{false, true} {
			got := dotU8(w, c, portable)
			if math.Abs(float64(got)-want) > 1e-4*math.Max(1, math.Abs(want))*float64(d) {
				t.Fatalf("d=%d portable=%v: %v, want %v", d, portable, got, want)
			}
		}
	}
}

// TestAssignedAdd checks the pieces of a multi-core add and training:
// Assign on several goroutines equals Assign on one; an index filled by
// AddLocatedAssigned with those lists holds every vector where FAISS's own
// add puts it in a copy of the same trained index; and an index trained with
// TrainThreaded (its k-means's assignment on threaded shards) searches as
// well as one trained by Train.
func TestAssignedAdd(t *testing.T) {
	ctx := context.Background()
	c := newCollection(41)
	for _, desc := range []string{"IVF16,Flat", "IVF32,SQ8"} {
		x, err := New(testD, desc, InnerProduct)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		if err := x.TrainThreaded(c.vecs, 2); err != nil {
			t.Fatal(err)
		}
		buf, err := x.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		y, err := Unmarshal(buf, desc, InnerProduct)
		if err != nil {
			t.Fatal(err)
		}
		defer y.Close()
		one, err := x.Assign(c.vecs, 1)
		if err != nil {
			t.Fatal(err)
		}
		two, err := x.Assign(c.vecs, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(one) != len(c.ids) || !slices.Equal(one, two) {
			t.Fatalf("%s: Assign on 1 and 2 goroutines differ", desc)
		}
		got, want := map[int64]uint64{}, map[int64]uint64{}
		if err := x.AddLocatedAssigned(c.ids, c.vecs, two, func(id int64, lo uint64) { got[id] = lo }); err != nil {
			t.Fatal(err)
		}
		// FAISS's own add (add_with_ids), whose locations Locate reads.
		if err := y.Add(c.ids, c.vecs); err != nil {
			t.Fatal(err)
		}
		if err := y.Locate(func(id int64, lo uint64) { want[id] = lo }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(c.ids) || !maps.Equal(got, want) {
			t.Fatalf("%s: %d locations from the assigned add, %d from add, and they differ", desc, len(got), len(want))
		}
		if err := x.AddLocatedAssigned(c.ids[:1], c.vecs[:testD], []int64{1 << 40}, func(int64, uint64) {}); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("%s: a list out of range: %v", desc, err)
		}

		// Recall of the threaded training against Train's.
		z, err := New(testD, desc, InnerProduct)
		if err != nil {
			t.Fatal(err)
		}
		defer z.Close()
		if err := z.Train(c.vecs); err != nil {
			t.Fatal(err)
		}
		if err := z.Add(c.ids, c.vecs); err != nil {
			t.Fatal(err)
		}
		exact := newIndex(t, c, "Flat")
		var rx, rz float64
		for q := range testNQ {
			want, err := exact.Search(ctx, c.query(q), 10, SearchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			gx, err := x.Search(ctx, c.query(q), 10, SearchOptions{NProbe: 4})
			if err != nil {
				t.Fatal(err)
			}
			gz, err := z.Search(ctx, c.query(q), 10, SearchOptions{NProbe: 4})
			if err != nil {
				t.Fatal(err)
			}
			rx += overlap(gx[0].IDs, want[0].IDs)
			rz += overlap(gz[0].IDs, want[0].IDs)
		}
		rx, rz = rx/testNQ, rz/testNQ
		t.Logf("%s, 4 lists probed: recall@10 %.3f trained on threads, %.3f by Train", desc, rx, rz)
		if rx < rz-0.05 {
			t.Errorf("%s: recall@10 %.3f trained on threads, %.3f by Train", desc, rx, rz)
		}
	}
}

// overlap is the fraction of want found in got.
func overlap(got, want []int64) float64 {
	n := 0
	for _, id := range want {
		if slices.Contains(got, id) {
			n++
		}
	}
	return float64(n) / float64(max(1, len(want)))
}
