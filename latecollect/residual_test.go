package latecollect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// everything makes every stage of the residual search keep every document,
// so that it must return the exact top k.
var everything = SearchOptions{NProbe: maxCentroids, CandidateCap: 1 << 20, ResidualCap: 1 << 20, ExactCap: 1 << 20}

// TestResidualSnapshotAndTokenFile saves the residual codes, changes the
// store, and reopens: from the snapshot with catch-up, then with the token
// file gone (recopied from the store), then with a corrupt token file (the
// exact stage reads the store instead). Every time, searches covering
// every document equal brute force.
func TestResidualSnapshotAndTokenFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newSynth(300, 8, 21)
	st := openStore(t, dir)
	c.write(t, st, F16)
	opts := &Options{Model: testModel, Dim: 8, Description: "Residual", SnapshotEvery: -1}
	r := rand.New(rand.NewPCG(3, 3))
	q := randomUnit(r, 4, 8)
	check := func(what string, x *Index) {
		t.Helper()
		so := everything
		so.K = 10
		got, err := x.Search(ctx, q, &so)
		if err != nil {
			t.Fatal(err)
		}
		sameHits(t, what, got, bruteForce(t, st, c, q, nil, ScoreAvgMax)[:10])
	}

	x, err := Open(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	if x.loadedSnapshot {
		t.Fatal("first open loaded a snapshot")
	}
	check("built", x)
	if err := x.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	x.Close()

	c.changeAfterSnapshot(t, st, r)

	y := openIndex(t, st, opts)
	if !y.loadedSnapshot || y.AppliedSeq() != st.LastSeq() {
		t.Fatalf("reopen: loaded snapshot %v, applied %d of %d", y.loadedSnapshot, y.AppliedSeq(), st.LastSeq())
	}
	s, _ := y.Stats()
	if s.Docs != 300 || !strings.HasPrefix(s.Description, "Residual") || s.TokenFileBytes == 0 || s.BytesPerToken <= 0 {
		t.Errorf("stats %+v: want 300 docs, residual codes, a token file", s)
	}
	check("after catch-up", y)
	if err := y.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	y.Close()

	path := tokenFilePath(dir, testModel)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	z := openIndex(t, st, opts)
	if !z.loadedSnapshot {
		t.Fatal("a missing token file made Open rebuild the codes; want a recopy")
	}
	check("token file recopied", z)

	// Flip bytes in the middle of the file while the index is open: the
	// checksums catch it and the store is read instead.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	junk := make([]byte, fi.Size()/2)
	if _, err := f.WriteAt(junk, fi.Size()/4); err != nil {
		t.Fatal(err)
	}
	f.Close()
	check("token file corrupt", z)
	if s, _ := z.Stats(); s.TokenFileErrors == 0 {
		t.Error("corrupt token file: no read errors counted")
	}
}

// TestResidualDescriptions checks that residual descriptions parse and bad
// ones are refused with ErrBadOptions.
func TestResidualDescriptions(t *testing.T) {
	for desc, want := range map[string]int{"Residual": 0, "Residual256": 256, "Residual65536": 65536} {
		if n, ok := residualLists(desc); !ok || n != want {
			t.Errorf("residualLists(%q) = %d, %v; want %d", desc, n, ok, want)
		}
	}
	st := openStore(t, "")
	for _, desc := range []string{"Residual3", "Residual0", "Residual131072", "Residualx"} {
		if _, err := Open(context.Background(), st, &Options{Model: testModel, Dim: 8, Description: desc}); err == nil || !strings.Contains(err.Error(), "Description") {
			t.Errorf("Open with %q: %v, want a bad-options error naming Description", desc, err)
		}
	}
	if _, err := Open(context.Background(), st, &Options{Model: testModel, Dim: 12, Description: "Residual"}); err == nil {
		t.Error("Open residual codes with dimension 12: no error (codes need a multiple of 8)")
	}
}

// Token pruning at the residual stage only ever leaves tokens out: with a
// margin wider than any score range it changes nothing, and with a margin
// of almost nothing no document scores higher than without pruning and
// some score lower.
func TestResidualTokenPrune(t *testing.T) {
	ctx := context.Background()
	c := newSynth(300, 16, 3)
	st := openStore(t, "")
	c.write(t, st, F32)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 16, Description: "Residual"})
	r := rand.New(rand.NewPCG(4, 4))
	// Every document reaches the residual stage and none is rescored
	// exactly, so the hits carry residual-code scores.
	search := func(q []float32, prune float32) map[uint64]float32 {
		hits, err := x.Search(ctx, q, &SearchOptions{K: 300, CandidateCap: 10000, NProbe: maxCentroids, ResidualCap: 10000, ExactCap: -1, TokenPrune: prune})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 300 {
			t.Fatalf("%d hits, want all 300 documents", len(hits))
		}
		m := map[uint64]float32{}
		for _, h := range hits {
			m[h.DocNum] = h.Score
		}
		return m
	}
	lower := 0
	for qi := range 5 {
		q := randomUnit(r, 3+qi, 16)
		all, wide, tight := search(q, -1), search(q, 100), search(q, 1e-9)
		for num, s := range all {
			if wide[num] != s {
				t.Fatalf("query %d: document %d scores %v with a margin of 100, %v without pruning", qi, num, wide[num], s)
			}
			if tight[num] > s {
				t.Fatalf("query %d: document %d scores %v pruned, more than %v without pruning", qi, num, tight[num], s)
			}
			if tight[num] < s {
				lower++
			}
		}
	}
	if lower == 0 {
		t.Error("pruning to each query token's best centroid never lowered a score: nothing was pruned")
	}
	if _, err := x.Search(ctx, randomUnit(r, 2, 16), &SearchOptions{TokenPrune: float32(math.NaN())}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("TokenPrune NaN: err %v, want ErrBadOptions", err)
	}
}

// Stage 2's two accumulators, by docnum in an array and in a map, give the
// same sums: each query token adds once per document, the first score it
// brings; documents the filter excludes are never added; a drain forgets
// everything.
func TestProbeSumsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 1))
	allow := roaring64.New()
	for num := range uint64(200) {
		if num%3 != 0 {
			allow.Add(num)
		}
	}
	dense := new(denseSums)
	dense.grow(200)
	sparse := newMapSums(10)
	for round := range 2 {
		want := map[uint64]float32{}
		seen := map[[2]uint32]bool{}
		for q := range int32(6) {
			for range 300 {
				num, s := uint32(r.IntN(200)), float32(r.NormFloat64())
				dense.add(num, q, s, allow)
				sparse.add(num, q, s, allow)
				if k := [2]uint32{num, uint32(q)}; num%3 != 0 && !seen[k] {
					seen[k] = true
					want[uint64(num)] += s
				}
			}
		}
		for name, acc := range map[string]probeSums{"dense": dense, "map": sparse} {
			got := acc.drain(nil)
			if len(got) != len(want) {
				t.Fatalf("round %d, %s: %d documents, want %d", round, name, len(got), len(want))
			}
			for _, c := range got {
				if w, ok := want[c.num]; !ok || math.Abs(float64(c.score-w)) > 1e-4 {
					t.Fatalf("round %d, %s: document %d sums %v, want %v (present %v)", round, name, c.num, c.score, w, ok)
				}
			}
			if again := acc.drain(nil); len(again) != 0 {
				t.Fatalf("round %d, %s: a second drain gave %d documents", round, name, len(again))
			}
		}
	}
}

// An index whose tokens are assigned to centroids in two levels (as from
// twoLevelCentroids centroids on) searches like any other: with every
// stage open it returns the exact top 10.
func TestResidualTwoLevelAssignment(t *testing.T) {
	saved := twoLevelFrom
	twoLevelFrom = 16
	defer func() { twoLevelFrom = saved }()
	ctx := context.Background()
	c := newSynth(300, 16, 5)
	st := openStore(t, "")
	c.write(t, st, F32)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 16, Description: "Residual64"})
	x.mu.RLock()
	_, two := residualOf(x).rc.cb.quant.(*twoLevel)
	x.mu.RUnlock()
	if !two {
		t.Fatal("the index did not assign through two levels")
	}
	r := rand.New(rand.NewPCG(5, 5))
	for qi := range 5 {
		q := randomUnit(r, 2+qi*3, 16)
		want := bruteForce(t, st, c, q, nil, ScoreAvgMax)[:10]
		got, err := x.Search(ctx, q, &everything)
		if err != nil {
			t.Fatal(err)
		}
		sameHits(t, fmt.Sprintf("query %d", qi), got, want)
	}
}

// The automatic exact stage takes ExactBudget token values' worth of
// documents at the index's mean length, within its bounds: every
// document of a small collection of short documents.
func TestResidualAutomaticExactCap(t *testing.T) {
	c := newSynth(300, 16, 6)
	st := openStore(t, "")
	c.write(t, st, F32)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 16, Description: "Residual"})
	s, _ := x.Stats()
	want := min(MaxExactCandidates, max(DefaultExactCandidates, int(ExactBudget/(float64(s.Tokens)/float64(s.Docs)*16))))
	x.mu.RLock()
	got := residualOf(x).exactCapLocked()
	x.mu.RUnlock()
	if got != want || got != MaxExactCandidates {
		t.Errorf("automatic exact cap %d, want %d (the maximum, for %d documents of %.1f 16-d tokens)", got, want, s.Docs, float64(s.Tokens)/float64(s.Docs))
	}
}

// bestFirst keeps what sorting everything and cutting keeps, ties in score
// included (broken by docnum).
func TestBestFirst(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, n := range []int{0, 1, 2, 3, 10, 100, 5000} {
		for _, k := range []int{1, 2, 5, 99, 1000, 6000} {
			c := make([]scored, n)
			for i := range c {
				c[i] = scored{num: uint64(r.IntN(1 << 30)), score: float32(r.IntN(50))}
			}
			want := slices.Clone(c)
			slices.SortFunc(want, byScore)
			want = want[:min(k, n)]
			if got := bestFirst(c, k); !slices.Equal(got, want) {
				t.Fatalf("n=%d k=%d: bestFirst differs from sort and cut", n, k)
			}
		}
	}
}

// topCentroids, in one share of the rows or several, finds each query
// token's best centroids by score, ties to the lower id, as a full sort
// does.
func TestTopCentroids(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	const nq, stride, nlist = 5, 8, 4000
	table := make([]float32, nlist*stride)
	for i := range table {
		table[i] = float32(r.IntN(50)) // many ties
	}
	for _, n := range []int{1, 8, 40} {
		for _, workers := range []int{1, 2, 3} {
			got := topCentroids(table, stride, nq, nlist, n, workers)
			for q := range nq {
				ids := make([]int32, nlist)
				for c := range ids {
					ids[c] = int32(c)
				}
				slices.SortStableFunc(ids, func(a, b int32) int {
					return cmp.Compare(table[int(b)*stride+q], table[int(a)*stride+q])
				})
				if !slices.Equal(got[q], ids[:n]) {
					t.Fatalf("n=%d workers=%d q=%d: %v, want %v", n, workers, q, got[q], ids[:n])
				}
			}
		}
	}
}

// BenchmarkTopCentroids measures stage 2's choice of each query token's 8
// best centroids among 8,192 for a 23-token query, on one worker and two.
func BenchmarkTopCentroids(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	const nq, stride, nlist = 23, 24, 8192
	table := make([]float32, nlist*stride)
	for i := range table {
		table[i] = r.Float32()
	}
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for b.Loop() {
				topCentroids(table, stride, nq, nlist, 8, workers)
			}
		})
	}
}

// TestNthSmallest checks quickselect against sorting, with and without
// repeated values, at every rank of small slices and some of large ones.
func TestNthSmallest(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 5, 8, 31, 100, 1000, 100_000} {
		for _, levels := range []int{2, 7, 0} {
			v := make([]float32, n)
			for i := range v {
				if levels > 0 {
					v[i] = float32(r.IntN(levels)) - 3
				} else {
					v[i] = float32(r.NormFloat64())
				}
			}
			sorted := slices.Clone(v)
			slices.Sort(sorted)
			ks := []int{0, n / 2, n - 1}
			if n <= 100 {
				ks = ks[:0]
				for k := range n {
					ks = append(ks, k)
				}
			}
			for _, k := range ks {
				w := slices.Clone(v)
				if got := nthSmallest(w, k); got != sorted[k] {
					t.Fatalf("n %d, levels %d: rank %d is %v, sorted says %v", n, levels, k, got, sorted[k])
				}
			}
		}
	}
}
