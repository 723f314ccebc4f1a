package latecollect

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/vfs"
	"github.com/tandemsearch/tandem/storage"
)

// everything makes every stage of the residual search keep every document,
// so that it must return the exact top k.
var everything = SearchOptions{NProbe: maxCentroids, CandidateCap: 1 << 20, ExactCap: 1 << 20}

// TestResidualSnapshot saves the residual codes, changes the store, and
// reopens from the snapshot with catch-up: searches covering every
// document equal brute force over the stored blobs, which the exact stage
// reads from the store (no file of the index's own holds them).
func TestResidualSnapshot(t *testing.T) {
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
		if s, _ := x.Stats(); s.ExactStale != 0 || s.ExactReadErrors != 0 {
			t.Errorf("%s: %d documents scored from codes as stale, %d as unreadable; want none", what, s.ExactStale, s.ExactReadErrors)
		}
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
	if s.Docs != 300 || !strings.HasPrefix(s.Description, "Residual") || s.BytesPerToken <= 0 {
		t.Errorf("stats %+v: want 300 docs, residual codes", s)
	}
	check("after catch-up", y)
	if _, err := os.Stat(filepath.Join(dir, "derived")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("derived/: %v, want none: the tokens are read from the store", err)
	}
}

// TestResidualStaleBlobs changes and deletes documents in the store
// without applying the changes to the index: their stored blobs are not
// the ones they were coded from, so the exact stage scores them from their
// codes (the version the index applied, as every other retriever still
// ranks it) and counts them, the other documents exactly, and searching
// again gives the same hits. Once the changes are applied, every document
// is scored exactly again.
func TestResidualStaleBlobs(t *testing.T) {
	ctx := context.Background()
	for _, where := range []string{"disk", "memory"} {
		t.Run(where, func(t *testing.T) {
			dir := ""
			if where == "disk" {
				dir = t.TempDir()
			}
			st := openStore(t, dir)
			// On disk, 64-d float16: blobs of more than 32 tokens go to
			// a segment, shorter ones stay in Badger. In memory, Badger
			// holds them all (at most 4 KiB).
			dim := 64
			if dir == "" {
				dim = 32
			}
			c := newSynth(200, dim, 5)
			c.write(t, st, F16)
			x := openIndex(t, st, &Options{Model: testModel, Dim: dim, Description: "Residual", SnapshotEvery: -1})
			f := residualOf(x)
			q := randomUnit(rand.New(rand.NewPCG(6, 6)), 5, dim)
			so := everything
			so.K = 200
			search := func() []Hit {
				t.Helper()
				hits, err := x.Search(ctx, q, &so)
				if err != nil {
					t.Fatal(err)
				}
				return hits
			}
			sameHits(t, "built", search(), bruteForce(t, st, c, q, nil, ScoreAvgMax))

			// d007 gets new tokens (as many as before, so that only the
			// stamp tells them apart), d008 is deleted.
			numOf := func(id string) uint64 {
				num, _, err := st.Lookup(id)
				if err != nil {
					t.Fatal(err)
				}
				return num
			}
			changed, deleted := numOf("d007"), numOf("d008")
			coded := map[uint64]float32{}
			for _, num := range []uint64{changed, deleted} {
				coded[num] = codesScoreByHand(t, f, num, q)
			}
			c.vecs["d007"] = randomUnit(rand.New(rand.NewPCG(7, 7)), len(c.vecs["d007"])/dim, dim)
			c.write(t, st, F16, "d007")
			var b storage.Batch
			b.Delete("d008")
			if _, err := st.Write(ctx, &b); err != nil {
				t.Fatal(err)
			}
			delete(c.vecs, "d008")
			want := bruteForce(t, st, c, q, func(num uint64) bool { return num != changed }, ScoreAvgMax)
			want = append(want, Hit{DocNum: changed, Score: coded[changed]}, Hit{DocNum: deleted, Score: coded[deleted]})
			want = topHits(want, len(want))
			got := search()
			sameHits(t, "changes not applied", got, want)
			sameHits(t, "changes not applied, again", search(), got)
			if s, _ := x.Stats(); s.ExactStale != 4 || s.ExactReadErrors != 0 {
				t.Errorf("%d documents scored from codes as stale, %d as unreadable; want 4 (2 per search) and 0", s.ExactStale, s.ExactReadErrors)
			}
			// Exhaustive mode and Rescore score them the same way.
			ex, err := x.Search(ctx, q, &SearchOptions{K: 200, Mode: Exhaustive})
			if err != nil {
				t.Fatal(err)
			}
			sameHits(t, "exhaustive, changes not applied", ex, want)

			if err := x.CatchUp(ctx); err != nil {
				t.Fatal(err)
			}
			stale, _ := x.Stats()
			sameHits(t, "changes applied", search(), bruteForce(t, st, c, q, nil, ScoreAvgMax))
			if s, _ := x.Stats(); s.ExactStale != stale.ExactStale {
				t.Errorf("changes applied: %d more documents scored from codes", s.ExactStale-stale.ExactStale)
			}
		})
	}
}

// codesScoreByHand is document num's avg-max score from its codes, each
// token decoded by hand (centroid plus the low or high value of each
// dimension, by its bit) and scored with AvgMax.
func codesScoreByHand(t *testing.T, f *residualFamily, num uint64, q []float32) float32 {
	t.Helper()
	cb := f.rc.cb
	d, ok := f.rc.docs[num]
	if !ok {
		t.Fatalf("document %d not held", num)
	}
	var vecs []float32
	cids, codes := f.rc.tokensOf(num, d, nil, nil)
	for i, c := range cids {
		for j := range cb.dim {
			v := cb.cent[int(c)*cb.dim+j]
			if codes[i*cb.dim/8+j/8]&(1<<(j%8)) != 0 {
				v += cb.hi[j]
			} else {
				v += cb.lo[j]
			}
			vecs = append(vecs, v)
		}
	}
	s, err := AvgMax(q, vecs, cb.dim, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestResidualDamagedBlobs damages the blob segment on disk while the
// index is open: the exact stage's reads fail their checksum, the
// documents are scored from their codes, counted, and the error kept
// names the segment; nothing else fails. A read error that is not
// corruption (the store closed) fails the search.
func TestResidualDamagedBlobs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	// 40 tokens of 32 float32: 5 KiB blobs, which go to a segment.
	r := rand.New(rand.NewPCG(11, 11))
	c := &synthCorpus{dim: 32, vecs: map[string][]float32{}}
	for i := range 60 {
		c.vecs[fmt.Sprintf("d%03d", i)] = randomUnit(r, 40, 32)
	}
	c.write(t, st, F32)
	if bs := st.BlobStats(); bs.Segments != 1 {
		t.Fatalf("blob stats %+v: want the blobs in one segment", bs)
	}
	x := openIndex(t, st, &Options{Model: testModel, Dim: 32, Description: "Residual", SnapshotEvery: -1})
	q := randomUnit(r, 4, 32)
	so := everything
	so.K = 60
	want := bruteForce(t, st, c, q, nil, ScoreAvgMax)
	got, err := x.Search(ctx, q, &so)
	if err != nil {
		t.Fatal(err)
	}
	sameHits(t, "intact", got, want)

	seg := filepath.Join(dir, "blobs", "000001.blob")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 100; i < len(b); i += 997 {
		b[i] ^= 0x20
	}
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{Candidates, Exhaustive} {
		so.Mode = mode
		got, err := x.Search(ctx, q, &so)
		if err != nil {
			t.Fatalf("%s with a damaged segment: %v", mode, err)
		}
		if len(got) != len(want) {
			t.Errorf("%s with a damaged segment: %d hits, want %d", mode, len(got), len(want))
		}
	}
	s, _ := x.Stats()
	if s.ExactReadErrors != 120 || s.ExactStale != 0 || !errors.Is(s.ExactReadErr, storage.ErrCorruption) || !strings.Contains(fmt.Sprint(s.ExactReadErr), "000001.blob") {
		t.Errorf("stats: %d unreadable, %d stale, error %v; want 120 (60 per search), 0, a corruption naming the segment", s.ExactReadErrors, s.ExactStale, s.ExactReadErr)
	}

	st.Close()
	if _, err := x.Search(ctx, q, &so); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("search over a closed store: %v, want storage.ErrClosed", err)
	}
}

// TestSettleFailureKeepsSearching damages the blob segment under a
// provisional codebook that is due to settle: the settling fails (it reads
// every blob), the search does not, using the codes in use, and the error
// is Stats.RetrainErr; a snapshot is still saved, as unsettled. With the
// segment repaired, the reopened index settles at its first search, to the
// codes of an index built from the store.
func TestSettleFailureKeepsSearching(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	opts := &Options{Model: testModel, Dim: 32, Description: "Residual", SnapshotEvery: -1}
	x := openIndex(t, st, opts)
	// 40 tokens of 32 float32: 5 KiB blobs, which go to a segment.
	r := rand.New(rand.NewPCG(12, 12))
	c := &synthCorpus{dim: 32, vecs: map[string][]float32{}}
	for i := range 60 {
		c.vecs[fmt.Sprintf("d%03d", i)] = randomUnit(r, 40, 32)
	}
	ids := slices.Sorted(mapsKeys(c.vecs))
	for i := 0; i < len(ids); i += 10 {
		c.write(t, st, F32, ids[i:i+10]...)
		if err := x.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if f := residualOf(x); !f.settleDue() {
		t.Fatal("after six Apply calls the provisional codebook is not due to settle")
	}
	built := openIndex(t, st, opts) // no snapshot yet: built from the store

	seg := filepath.Join(dir, "blobs", "000001.blob")
	intact, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b := slices.Clone(intact)
	for i := 100; i < len(b); i += 997 {
		b[i] ^= 0x20
	}
	if err := os.WriteFile(seg, b, 0o644); err != nil {
		t.Fatal(err)
	}
	q := randomUnit(r, 4, 32)
	so := everything
	so.K = 60
	for range 2 {
		if got, err := x.Search(ctx, q, &so); err != nil || len(got) != 60 {
			t.Fatalf("search with a damaged segment, due to settle: %d hits, %v; want 60", len(got), err)
		}
	}
	if s, _ := x.Stats(); !errors.Is(s.RetrainErr, storage.ErrCorruption) {
		t.Errorf("Stats.RetrainErr %v, want the settling's corruption", s.RetrainErr)
	}
	if f := residualOf(x); !f.unsettled || f.settleDue() {
		t.Errorf("after a failed settling: unsettled %v, due %v; want unsettled, not due before the next Apply", f.unsettled, f.settleDue())
	}
	if err := x.Snapshot(ctx); err != nil {
		t.Fatalf("snapshot with a damaged segment: %v", err)
	}
	x.Close()

	if err := os.WriteFile(seg, intact, 0o644); err != nil {
		t.Fatal(err)
	}
	y := openIndex(t, st, opts)
	if !y.LoadedSnapshot() || !residualOf(y).settleDue() {
		t.Fatalf("reopened: loaded %v, due to settle %v; want both", y.LoadedSnapshot(), residualOf(y).settleDue())
	}
	if _, err := y.Search(ctx, q, &so); err != nil {
		t.Fatal(err)
	}
	sameCodes(t, "settled after the repair", residualOf(y), residualOf(built))
	if s, _ := y.Stats(); s.RetrainErr != nil {
		t.Errorf("Stats.RetrainErr %v after settling, want none", s.RetrainErr)
	}
}

// TestResidualStoreClosedDuringSearch closes the store while searches
// read blobs on several workers: Close returns, and each search either
// completes or fails with storage.ErrClosed, none hangs.
func TestResidualStoreClosedDuringSearch(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := storage.Open(dir, &storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(12, 12))
	c := &synthCorpus{dim: 32, vecs: map[string][]float32{}}
	for i := range 200 {
		c.vecs[fmt.Sprintf("d%03d", i)] = randomUnit(r, 40, 32) // 5 KiB: in a segment
	}
	c.write(t, st, F32)
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 32, Description: "Residual", SnapshotEvery: -1, Parallelism: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	q := randomUnit(r, 4, 32)
	errs := make(chan error, 4)
	started := make(chan struct{}, 4)
	for range 4 {
		go func() {
			so := everything
			so.K = 10
			for i := 0; ; i++ {
				if i == 2 {
					started <- struct{}{}
				}
				if _, err := x.Search(ctx, q, &so); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 4 {
		<-started
	}
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	deadline := time.After(30 * time.Second)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-deadline:
		t.Fatal("the store's Close hung behind searches")
	}
	for range 4 {
		select {
		case err := <-errs:
			if !errors.Is(err, storage.ErrClosed) {
				t.Errorf("search as the store closed: %v, want storage.ErrClosed", err)
			}
		case <-deadline:
			t.Fatal("a search hung after the store closed")
		}
	}
}

// TestResidualSnapshotFormat1 opens a collection saved before the tokens
// were read from the store: a format-1 snapshot (token-file id, size and
// per-document locations, as encodeSnapshotV1 writes them, which
// reproduces that code's snapshots byte for byte) and its token file. The
// snapshot loads and catches up, the token file and its directory are
// removed, every document is scored exactly (the stamps are the locations'
// lengths and CRCs; documents the file lacked have none and pass on their
// token count), and the next snapshot is format 2.
func TestResidualSnapshotFormat1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newSynth(300, 8, 21)
	st := openStore(t, dir)
	c.write(t, st, F16)
	opts := &Options{Model: testModel, Dim: 8, Description: "Residual", SnapshotEvery: -1}
	x := openIndex(t, st, opts)
	f := residualOf(x)
	seq := x.AppliedSeq()
	var off int64 = 16
	v1 := encodeSnapshotV1(f, 0x1234, 99999, func(num uint64) v1Loc {
		d := f.rc.docs[num]
		if num%7 == 0 {
			return v1Loc{} // not in the token file
		}
		off += int64(d.blob.size)
		return v1Loc{off: off - int64(d.blob.size), size: d.blob.size, crc: d.blob.crc}
	})
	x.Close()
	if err := st.SaveSnapshot(ctx, "late-"+testModel, seq, func(w io.Writer) error {
		_, err := w.Write(v1)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "derived", "late-"+testModel+".tokens")
	if err := os.MkdirAll(filepath.Dir(tokens), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tokens, tokens + ".tmp"} {
		if err := os.WriteFile(p, []byte("TLTF old token file"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(3, 3))
	c.changeAfterSnapshot(t, st, r)
	q := randomUnit(r, 4, 8)
	check := func(what string, x *Index) {
		t.Helper()
		so := everything
		so.K = 301
		got, err := x.Search(ctx, q, &so)
		if err != nil {
			t.Fatal(err)
		}
		sameHits(t, what, got, bruteForce(t, st, c, q, nil, ScoreAvgMax))
		if s, _ := x.Stats(); s.ExactStale != 0 || s.Docs != 300 {
			t.Errorf("%s: %d documents, %d scored from codes as stale; want 300 and none", what, s.Docs, s.ExactStale)
		}
	}

	y := openIndex(t, st, opts)
	if !y.LoadedSnapshot() || y.AppliedSeq() != st.LastSeq() {
		t.Fatalf("format 1: loaded %v, applied %d of %d", y.LoadedSnapshot(), y.AppliedSeq(), st.LastSeq())
	}
	if _, err := os.Stat(filepath.Join(dir, "derived")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the old token file's directory: %v, want it removed", err)
	}
	check("format 1", y)
	if saved := y.SavedSeq(); saved == 0 || saved > y.AppliedSeq() {
		t.Errorf("format 1: SavedSeq %d, want the loaded snapshot's, in (0, %d]", saved, y.AppliedSeq())
	}
	if err := y.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	saved := y.SavedSeq()
	if saved != y.AppliedSeq() {
		t.Errorf("after Snapshot: SavedSeq %d, want AppliedSeq %d", saved, y.AppliedSeq())
	}
	y.Close()
	rc, _, err := st.OpenSnapshot("late-" + testModel)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 8)
	_, err = io.ReadFull(rc, head)
	rc.Close()
	if err != nil || string(head[:4]) != residualMagic || binary.LittleEndian.Uint32(head[4:]) != residualVersion {
		t.Fatalf("snapshot saved after format 1 starts %q (%v), want format %d", head, err, residualVersion)
	}
	z := openIndex(t, st, opts)
	if !z.LoadedSnapshot() || z.SavedSeq() != saved {
		t.Fatalf("format 2 snapshot: loaded %v, SavedSeq %d, want %d", z.LoadedSnapshot(), z.SavedSeq(), saved)
	}
	check("format 2", z)
}

// TestUnsettledSnapshotSettles saves, as snapshots were saved before
// settledBit, a provisional codebook trained on the first Apply call's
// documents with later calls' coded with it (here in format 1, which has
// no settledBit either): reopened from it, the index settles before its
// first search, to the codebook and codes of an index built from the
// store.
func TestUnsettledSnapshotSettles(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	opts := &Options{Model: testModel, Dim: 16, SnapshotEvery: -1, Description: "Residual"}
	x := openIndex(t, st, opts)
	c := newSynth(120, 16, 41)
	c.write(t, st, F16)
	for x.AppliedSeq() < st.LastSeq() {
		ch, err := st.Changes(ctx, x.AppliedSeq(), 8)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Apply(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	f := residualOf(x)
	if !f.unsettled || !f.rc.cb.provisional {
		t.Fatalf("after Apply calls of 8: unsettled %v, provisional %v; want both", f.unsettled, f.rc.cb.provisional)
	}
	old := encodeSnapshotV1(f, 0, 0, func(num uint64) v1Loc {
		d := f.rc.docs[num]
		return v1Loc{size: d.blob.size, crc: d.blob.crc}
	})
	oldCent := slices.Clone(f.rc.cb.cent)
	seq := x.AppliedSeq()
	x.Close()
	built := openIndex(t, st, opts) // no snapshot yet: built from the store
	if slices.Equal(oldCent, residualOf(built).rc.cb.cent) {
		t.Fatal("the codebook of the first call's documents is that of them all: nothing to settle")
	}
	if err := st.SaveSnapshot(ctx, "late-"+testModel, seq, func(w io.Writer) error {
		_, err := w.Write(old)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	y := openIndex(t, st, opts)
	if g := residualOf(y); !y.LoadedSnapshot() || !g.unsettled || !g.rc.cb.provisional {
		t.Fatalf("reopened: loaded %v, unsettled %v, provisional %v; want all", y.LoadedSnapshot(), g.unsettled, g.rc.cb.provisional)
	}
	q := randomUnit(rand.New(rand.NewPCG(4, 4)), 6, 16)
	got, err := y.Search(ctx, q, &SearchOptions{K: 20, ExactCap: -1})
	if err != nil {
		t.Fatal(err)
	}
	want, err := built.Search(ctx, q, &SearchOptions{K: 20, ExactCap: -1})
	if err != nil {
		t.Fatal(err)
	}
	sameHits(t, "residual-code scores after settling", got, want)
	sameCodes(t, "settled", residualOf(y), residualOf(built))
	if !residualOf(y).rc.cb.provisional {
		t.Error("settling ended the provisional codebook: only the next run does")
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

// The list stage scores a candidate per query token from its tokens
// listed under the probed centroids: with every centroid probed, that is
// every token, and its score is its residual-code score (as decoded by
// hand, within the 16-bit tables' rounding); with one centroid probed,
// no document scores above its every-token score unless a query token
// has none of its tokens in its own probed list and takes the estimate.
func TestListStageScores(t *testing.T) {
	ctx := context.Background()
	c := newSynth(300, 16, 3)
	st := openStore(t, "")
	c.write(t, st, F32)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 16, Description: "Residual"})
	f := x.mu.fam.(*residualFamily)
	r := rand.New(rand.NewPCG(4, 4))
	// Every document is a candidate and none is rescored exactly, so the
	// hits carry list-stage scores.
	search := func(q []float32, nprobe, est int) map[uint64]float32 {
		hits, err := x.Search(ctx, q, &SearchOptions{K: 300, CandidateCap: 10000, NProbe: nprobe, ExactCap: -1, listEst: est})
		if err != nil {
			t.Fatal(err)
		}
		m := map[uint64]float32{}
		for _, h := range hits {
			m[h.DocNum] = h.Score
		}
		return m
	}
	for qi := range 5 {
		q := randomUnit(r, 3+qi, 16)
		all := search(q, maxCentroids, 0)
		if len(all) != 300 {
			t.Fatalf("query %d: %d hits with every centroid probed, want all 300 documents", qi, len(all))
		}
		for num, s := range all {
			if want := codesScoreByHand(t, f, num, q); math.Abs(float64(s-want)) > 0.01 {
				t.Fatalf("query %d: document %d scores %v in the list stage, %v from its codes by hand", qi, num, s, want)
			}
		}
		// An estimate below every score leaves each document at most at
		// its every-token score; candidates come from stage 2 alone.
		one := search(q, 1, f.rc.cb.nlist)
		if len(one) == 0 {
			t.Fatalf("query %d: no hits probing one centroid", qi)
		}
		for num, s := range one {
			if s > all[num]+1e-6 {
				t.Fatalf("query %d: document %d scores %v probing one centroid, above its every-token %v", qi, num, s, all[num])
			}
		}
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
	// The filter as a bit per docnum (for denseSums) and as the bitmap
	// (for mapSums), and a bitmap reaching past the largest docnum.
	allow.Add(1 << 40)
	bits, bm := newAllowSet(allow, 199, false), newAllowSet(allow, 199, true)
	defer bits.release()
	for num := range uint32(1000) {
		if want := num < 200 && num%3 != 0; bits.has(num) != want || bm.has(num) != (want || num >= 200 && allow.Contains(uint64(num))) {
			t.Fatalf("docnum %d: allowed %v by bits, %v by the bitmap; want %v", num, bits.has(num), bm.has(num), want)
		}
	}
	for round := range 2 {
		want := map[uint64]float32{}
		seen := map[[2]uint32]bool{}
		for q := range int32(6) {
			for range 300 {
				num, s := uint32(r.IntN(200)), float32(r.NormFloat64())
				dense.add(num, q, s, bits)
				sparse.add(num, q, s, bm)
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
	saved, savedTrain := twoLevelFrom, twoLevelTrainFrom
	twoLevelFrom, twoLevelTrainFrom = 16, 16
	defer func() { twoLevelFrom, twoLevelTrainFrom = saved, savedTrain }()
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

// topCentroids, by a sampled threshold or in one share of the rows or
// several, finds each query token's best centroids by score, ties to the
// lower id, as a full sort does; also for a query token whose best
// centroids are the sampled ones, so that the sample's threshold keeps
// too few.
func TestTopCentroids(t *testing.T) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	r := rand.New(rand.NewPCG(5, 5))
	for _, nlist := range []int{16384, 4000, 1500} {
		for _, shape := range []struct{ nq, stride int }{{5, 8}, {13, 16}} {
			nq, stride := shape.nq, shape.stride
			table := make([]float32, nlist*stride)
			for i := range table {
				table[i] = float32(r.IntN(50)) // many ties
			}
			if step := nlist / estimateSample; step >= 4 {
				for c := 0; c < nlist; c += step {
					table[c*stride+2] = 100 + float32(r.IntN(5))
				}
			}
			for _, asm := range []bool{false, saved} {
				useAVX2 = asm
				for _, n := range []int{1, 8, 40, 600} {
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
								t.Fatalf("nlist=%d nq=%d asm=%v n=%d workers=%d q=%d: %v, want %v", nlist, nq, asm, n, workers, q, got[q], ids[:n])
							}
						}
					}
				}
			}
		}
	}
}

// rowsAbove8 finds the rows with a lane at or above its threshold, in
// order, the same with the AVX2 kernel as without; NaN reaches no
// threshold and +Inf passes every one.
func TestRowsAbove8(t *testing.T) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	r := rand.New(rand.NewPCG(8, 8))
	const rows, stride = 1000, 24
	table := make([]float32, rows*stride)
	for i := range table {
		table[i] = r.Float32()
	}
	for j := range 8 {
		table[3*stride+j] = -1 // but for a NaN, row 3 reaches nothing
	}
	table[3*stride+5] = float32(math.NaN())
	table[7*stride+1] = float32(math.Inf(1))
	thr := [8]float32{0.99, 0.995, 2, 0.98, 0.999, 0.99, 0.97, float32(math.Inf(1))}
	for _, off := range []int{0, 8, 16} {
		var want []int32
		for row := range rows {
			for j := range 8 {
				if table[row*stride+off+j] >= thr[j] {
					want = append(want, int32(row))
					break
				}
			}
		}
		if off == 0 && (!slices.Contains(want, 7) || slices.Contains(want, 3)) {
			t.Fatalf("lanes 0-7: rows %v, want row 7 (+Inf) among them and not row 3 (NaN)", want)
		}
		for _, asm := range []bool{false, saved} {
			useAVX2 = asm
			out := make([]int32, rows)
			if got := out[:rowsAbove8(table[off:], stride, rows, &thr, out)]; !slices.Equal(got, want) {
				t.Errorf("lanes %d-%d, asm=%v: rows %v, want %v", off, off+7, asm, got, want)
			}
		}
	}
}

func BenchmarkTopCentroids(b *testing.B) {
	for _, shape := range []struct{ nq, stride, nlist, n int }{{23, 24, 8192, 8}, {32, 32, 32768, 64}} {
		r := rand.New(rand.NewPCG(5, 6))
		table := make([]float32, shape.nlist*shape.stride)
		for i := range table {
			table[i] = r.Float32()
		}
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%dx%d/top%d/workers=%d", shape.nq, shape.nlist, shape.n, workers), func(b *testing.B) {
				for b.Loop() {
					topCentroids(table, shape.stride, shape.nq, shape.nlist, shape.n, workers)
				}
			})
		}
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

// TestSnapshotBehindFloor saves a snapshot, changes documents and
// truncates the change log past the snapshot: Open must not load it
// (the changes after it are gone) but build from the stored tokens, and
// rank as exact search does.
func TestSnapshotBehindFloor(t *testing.T) {
	ctx := context.Background()
	c := newSynth(300, 8, 31)
	st := openStore(t, t.TempDir())
	c.write(t, st, F16)
	opts := &Options{Model: testModel, Dim: 8, Description: "Residual", SnapshotEvery: -1}
	x := openIndex(t, st, opts)
	if err := x.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	x.Close()
	r := rand.New(rand.NewPCG(4, 4))
	c.changeAfterSnapshot(t, st, r)
	if _, err := st.TruncateLog(ctx, st.LastSeq()); err != nil {
		t.Fatal(err)
	}
	y := openIndex(t, st, opts)
	defer y.Close()
	if y.LoadedSnapshot() || y.AppliedSeq() != st.LastSeq() {
		t.Fatalf("snapshot behind the floor: loaded %v, applied %d of %d", y.LoadedSnapshot(), y.AppliedSeq(), st.LastSeq())
	}
	q := randomUnit(r, 4, 8)
	so := everything
	so.K = 10
	got, err := y.Search(ctx, q, &so)
	if err != nil {
		t.Fatal(err)
	}
	sameHits(t, "built past the floor", got, bruteForce(t, st, c, q, nil, ScoreAvgMax)[:10])
}

// TestAutomaticSnapshotRetried fails the first automatic snapshot (the
// file cannot be created) and checks that Stats reports it and that a
// later one, SnapshotEvery sequences on, succeeds: an index whose
// snapshots stopped would hold the collection's change log back for good.
func TestAutomaticSnapshotRetried(t *testing.T) {
	ctx := context.Background()
	fsys := &vfs.Faulty{}
	st, err := storage.Open(t.TempDir(), &storage.Options{NoSync: true, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := newSynth(100, 8, 41)
	c.write(t, st, F16)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 8, Description: "Residual", SnapshotEvery: 50})
	defer x.Close()
	r := rand.New(rand.NewPCG(5, 5))
	rewrite := func() {
		t.Helper()
		for id := range c.vecs {
			c.vecs[id] = randomUnit(r, 3, c.dim)
		}
		c.write(t, st, F16)
		if err := x.CatchUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	fsys.Inject(vfs.Rule{Op: vfs.OpCreate, Match: "snapshots/late-"})
	rewrite()
	fsys.Clear()
	if s, _ := x.Stats(); s.SnapshotErr == nil || x.SavedSeq() != 0 || fsys.Hits() == 0 {
		t.Fatalf("with snapshots failing: SnapshotErr %v, SavedSeq %d, %d faults", s.SnapshotErr, x.SavedSeq(), fsys.Hits())
	}
	failedAt := x.AppliedSeq()
	rewrite()
	if s, _ := x.Stats(); s.SnapshotErr != nil || x.SavedSeq() <= failedAt {
		t.Fatalf("after the fault: SnapshotErr %v, SavedSeq %d (the failed snapshot was at %d, applied %d)", s.SnapshotErr, x.SavedSeq(), failedAt, x.AppliedSeq())
	}
}

// A format-2 snapshot (codes per document) loads into the code lists:
// the reopened index holds every document's codes as the index that
// saved it did, searches as brute force does, and saves format 3.
func TestResidualSnapshotFormat2(t *testing.T) {
	ctx := context.Background()
	c := newSynth(200, 8, 22)
	st := openStore(t, t.TempDir())
	c.write(t, st, F16)
	opts := &Options{Model: testModel, Dim: 8, Description: "Residual", SnapshotEvery: -1}
	x := openIndex(t, st, opts)
	f := residualOf(x)
	seq := x.AppliedSeq()
	v2 := encodeSnapshotV2(f)
	if err := st.SaveSnapshot(ctx, "late-"+testModel, seq, func(w io.Writer) error {
		_, err := w.Write(v2)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	y := openIndex(t, st, opts)
	if !y.LoadedSnapshot() {
		t.Fatal("format 2: not loaded")
	}
	sameCodes(t, "format 2", residualOf(y), f)
	q := randomUnit(rand.New(rand.NewPCG(5, 5)), 4, 8)
	so := everything
	so.K = 201
	got, err := y.Search(ctx, q, &so)
	if err != nil {
		t.Fatal(err)
	}
	sameHits(t, "format 2", got, bruteForce(t, st, c, q, nil, ScoreAvgMax))
	if err := y.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	y.Close()
	z := openIndex(t, st, opts)
	if !z.LoadedSnapshot() {
		t.Fatal("format 3: not loaded")
	}
	sameCodes(t, "format 3 after format 2", residualOf(z), f)
	x.Close()
}

// withinBudget keeps each query token's best centroids up to the first
// whose lists hold the budget together, never fewer than
// MinCentroidProbe or one centroid in MinProbeShare, and all of them when
// they hold less.
func TestWithinBudget(t *testing.T) {
	r := &residualIndex{clists: make([]codeList, 20), cb: &codebook{nlist: 20}}
	for c := range r.clists {
		r.clists[c].docs = make([]uint32, 100*(c+1))
	}
	ids := func(cs ...int32) []int32 { return cs }
	all := ids(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	for _, tc := range []struct {
		budget int
		want   int
	}{
		{0, 12},       // no budget
		{100, 8},      // the minimum
		{4500, 9},     // 100+200+...+900 = 4,500
		{4501, 10},    // one more entry needs the tenth
		{1 << 20, 12}, // all of them hold less
	} {
		got := r.withinBudget([][]int32{slices.Clone(all)}, tc.budget)
		if len(got[0]) != tc.want || !slices.Equal(got[0], all[:tc.want]) {
			t.Errorf("budget %d: %v, want the first %d", tc.budget, got[0], tc.want)
		}
	}
	// With 33,792 centroids (11 in 3,072) the least is 11; with 16,384, 8.
	for _, tc := range []struct{ nlist, want int }{{33792, 11}, {16384, 8}} {
		r.cb.nlist = tc.nlist
		if got := r.withinBudget([][]int32{slices.Clone(all)}, 100); len(got[0]) != tc.want {
			t.Errorf("%d centroids, budget 100: %d probed, want %d", tc.nlist, len(got[0]), tc.want)
		}
	}
}

// The list stage runs when the exact scores it saves cost more than
// reading its lists: drop·values per document against listEntryValues per
// entry probed.
func TestListStagePays(t *testing.T) {
	r := &residualIndex{clists: make([]codeList, 4), cb: &codebook{nlist: 4}, docs: map[uint64]docMeta{}}
	for c := range r.clists {
		r.clists[c].docs = make([]uint32, 1000) // 4,000 entries probed below
	}
	for num := range 10 {
		r.docs[uint64(num)] = docMeta{}
	}
	r.tokens = 10 * 8 // 8 tokens of 16 values: 128 values a document
	f := &residualFamily{rc: r}
	f.opts.Dim = 16
	tops := [][]int32{{0, 1}, {2, 3}}
	// 8,000 values' worth of list entries: 62 documents' exact scores.
	for _, tc := range []struct {
		drop int
		want bool
	}{{1, false}, {62, false}, {63, true}, {1000, true}} {
		if got := f.listStagePays(tops, tc.drop); got != tc.want {
			t.Errorf("dropping %d documents of 128 values against 4,000 entries: pays %v, want %v", tc.drop, got, tc.want)
		}
	}
}

// centroidBest takes, per query token, the best of the document's
// centroids' scores, the same with the AVX2 kernel as without, for any
// number of centroids (the kernel takes two rows a step).
func TestCentroidBest(t *testing.T) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	r := rand.New(rand.NewPCG(9, 9))
	const nlist, stride = 500, 32
	table := make([]float32, nlist*stride)
	for i := range table {
		table[i] = r.Float32()*2 - 1
	}
	for _, n := range []int{0, 1, 2, 3, 8, 57} {
		cents := make([]uint16, 0, n)
		for _, c := range r.Perm(nlist)[:n] {
			cents = append(cents, uint16(c))
		}
		slices.Sort(cents)
		for _, nq := range []int{5, 8, 27, 32} {
			want := make([]float32, nq)
			for q := range want {
				want[q] = float32(math.Inf(-1))
				for _, c := range cents {
					want[q] = max(want[q], table[int(c)*stride+q])
				}
			}
			for _, asm := range []bool{false, saved} {
				useAVX2 = asm
				got := make([]float32, nq)
				centroidBest(cents, table, stride, got)
				if !slices.Equal(got, want) {
					t.Errorf("%d centroids, %d query tokens, asm=%v: %v, want %v", n, nq, asm, got, want)
				}
			}
		}
	}
}

// A code list stays in docnum order, each document's entries contiguous
// and in the order added, with its own codes, through adds in any docnum
// order (an update re-adds an older document), removes, merges (absorb)
// and the sort of a list read from an older snapshot.
func TestCodeListOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 12))
	const cb = 3
	code := func(num uint32, t int) []byte { return []byte{byte(num), byte(num >> 8), byte(t)} }
	want := map[uint32]int{} // document → entries held
	var l codeList
	check := func(step string) {
		t.Helper()
		if !slices.IsSorted(l.docs) {
			t.Fatalf("%s: docs out of order: %v", step, l.docs)
		}
		if len(l.codes) != len(l.docs)*cb {
			t.Fatalf("%s: %d docs, %d code bytes", step, len(l.docs), len(l.codes))
		}
		got := map[uint32]int{}
		for i, num := range l.docs {
			c := l.codes[i*cb : (i+1)*cb]
			if !slices.Equal(c[:2], code(num, 0)[:2]) || int(c[2]) != got[num] {
				t.Fatalf("%s: entry %d (document %d) has code %v, want token %d of it", step, i, num, c, got[num])
			}
			got[num]++
		}
		for num, n := range want {
			if got[num] != n {
				t.Fatalf("%s: document %d has %d entries, want %d", step, num, got[num], n)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d documents, want %d", step, len(got), len(want))
		}
	}
	put := func(l *codeList, num uint32, n int) {
		for i := range n {
			l.add(num, code(num, i))
		}
	}
	for i := range 3000 {
		num := uint32(i)
		if rng.IntN(4) == 0 && i > 0 {
			num = uint32(rng.IntN(i)) // an update
		}
		if want[num] > 0 {
			l.remove(num, cb)
		}
		n := 1 + rng.IntN(3)
		put(&l, num, n)
		want[num] = n
	}
	check("adds")
	for num := range want {
		if rng.IntN(3) == 0 {
			l.remove(num, cb)
			delete(want, num)
		}
	}
	check("removes")
	// absorb: a side list of documents the list does not hold, some
	// interleaved with its own, some after them.
	var side codeList
	for num := uint32(0); num < 4000; num++ {
		if want[num] == 0 && rng.IntN(5) == 0 {
			n := 1 + rng.IntN(2)
			put(&side, num, n)
			want[num] = n
		}
	}
	l.addAll(side.docs, side.codes, cb)
	check("merge")
	var tail codeList
	put(&tail, 5000, 2)
	want[5000] = 2
	l.addAll(tail.docs, tail.codes, cb)
	check("append")
	// A list in the order of an older snapshot: documents' runs shuffled.
	var runs [][2]int
	for i := 0; i < len(l.docs); {
		j := i
		for j < len(l.docs) && l.docs[j] == l.docs[i] {
			j++
		}
		runs = append(runs, [2]int{i, j})
		i = j
	}
	rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	var old codeList
	for _, r := range runs {
		old.docs = append(old.docs, l.docs[r[0]:r[1]]...)
		old.codes = append(old.codes, l.codes[r[0]*cb:r[1]*cb]...)
	}
	l = old
	if !l.sortByDoc(cb) {
		t.Fatal("sortByDoc: a shuffled list reported in order")
	}
	check("sort")
	if l.sortByDoc(cb) {
		t.Fatal("sortByDoc: a sorted list reported out of order")
	}
}
