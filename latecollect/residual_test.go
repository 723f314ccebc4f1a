package latecollect

import (
	"context"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
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
