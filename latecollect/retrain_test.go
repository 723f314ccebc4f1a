package latecollect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/storage"
)

// holdRetrain makes background retrainings stop, once they have coded the
// documents held when they started, until release is closed (or the job
// is cancelled); reached receives once per job that gets there.
func holdRetrain(t *testing.T) (reached chan struct{}, release chan struct{}) {
	reached, release = make(chan struct{}, 8), make(chan struct{})
	retrainHook = func(ctx context.Context) {
		reached <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	t.Cleanup(func() { retrainHook = nil })
	return reached, release
}

// waitReached fails the test if no retraining reaches the hook within a
// generous minute (the behaviour tested is that one starts at all).
func waitReached(t *testing.T, reached chan struct{}) {
	t.Helper()
	select {
	case <-reached:
	case <-time.After(time.Minute):
		t.Fatal("no retraining started")
	}
}

// growToRetrain writes c's documents in batches of 100 to a store the index
// follows, so that the residual codes outgrow their centroids and a
// retraining starts in the background.
func growToRetrain(t *testing.T, st *storage.Store, x *Index, c *synthCorpus) {
	t.Helper()
	ids := slices.Sorted(mapsKeys(c.vecs))
	for i := 0; i < len(ids); i += 100 {
		c.write(t, st, F16, ids[i:min(i+100, len(ids))]...)
	}
	if err := x.CatchUp(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func mapsKeys(m map[string][]float32) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestRetrainInBackground holds a retraining of the residual codes
// mid-way (its new codebook trained and the documents held coded) and
// checks that searches and writes complete meanwhile, with the old codes;
// then lets it swap its codes in and checks the result: more centroids,
// every document (those written meanwhile too) found first by its own
// tokens, the deleted one gone, exhaustive scores those of the stored
// matrices, and the same documents as an index built from scratch.
func TestRetrainInBackground(t *testing.T) {
	ctx := context.Background()
	reached, release := holdRetrain(t)
	st := openStore(t, t.TempDir())
	opts := &Options{Model: testModel, Dim: 16, SnapshotEvery: -1, Description: "Residual"}
	x := openIndex(t, st, opts)
	c := newSynth(1500, 16, 21)
	growToRetrain(t, st, x, c)
	waitReached(t, reached)

	before, err := x.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !before.Retraining || before.Retrains != 1 {
		t.Fatalf("stats while held: %+v, want a retraining running", before)
	}
	// Searches complete, with the old codes.
	r := rand.New(rand.NewPCG(7, 7))
	for q := range 5 {
		query := randomUnit(r, 6, 16)
		for _, mode := range []Mode{Candidates, Exhaustive} {
			if hits, err := x.Search(ctx, query, &SearchOptions{K: 10, Mode: mode}); err != nil || len(hits) != 10 {
				t.Fatalf("query %d, %v, while retraining: %d hits, %v", q, mode, len(hits), err)
			}
		}
	}
	// Writes complete: an update, a new document, a delete, and enough
	// updates that the job codes them in a pass off the lock first.
	for i := 100; i < 100+2*lastDeltaDocs; i++ {
		c.vecs[fmt.Sprintf("d%03d", i)] = randomUnit(r, 5+i%7, 16)
	}
	c.vecs["d010"] = randomUnit(r, 6, 16)
	c.vecs["new"] = randomUnit(r, 9, 16)
	changed := []string{"d010", "new"}
	for i := 100; i < 100+2*lastDeltaDocs; i++ {
		changed = append(changed, fmt.Sprintf("d%03d", i))
	}
	c.write(t, st, F16, changed...)
	var b storage.Batch
	b.Delete("d020")
	if _, err := st.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	delete(c.vecs, "d020")
	if err := x.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	newNum, _, _ := st.Lookup("new")
	hits, err := x.Search(ctx, c.vecs["new"], &SearchOptions{K: 3})
	if err != nil || len(hits) == 0 || hits[0].DocNum != newNum || math.Abs(float64(hits[0].Score)-1) > 1e-3 {
		t.Fatalf("new document while retraining: hits %v, %v; want document %d with score 1", hits, err, newNum)
	}
	if s, _ := x.Stats(); !s.Retraining {
		t.Fatal("the retraining ended while held")
	}
	// Applied after the job trained its codebook, every document written
	// meanwhile was coded with it too, and the deleted one was not kept.
	x.mu.RLock()
	side := residualOf(x).side()
	x.mu.RUnlock()
	if side.docCount() != len(changed) {
		t.Fatalf("the job's side index holds %d documents, want the %d written while it was held", side.docCount(), len(changed))
	}
	if _, ok := side.held(uint64(newNum)); !ok {
		t.Fatal("the new document is not in the job's side index")
	}

	close(release)
	if err := x.WaitRetrain(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := x.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after.Retraining || after.RetrainErr != nil || after.Centroids <= before.Centroids || after.Docs != len(c.vecs) || !x.Unsaved() {
		t.Fatalf("after the swap: %+v (before %+v, unsaved %v), want more centroids and %d documents", after, before, x.Unsaved(), len(c.vecs))
	}
	t.Logf("held: %s, %d documents; after the swap: %s, %d documents", before.Description, before.Docs, after.Description, after.Docs)
	checkEveryDocFound(t, st, x, c)
	for q := range 5 {
		query := randomUnit(r, 6, 16)
		hits, err := x.Search(ctx, query, &SearchOptions{K: 20, Mode: Exhaustive})
		if err != nil {
			t.Fatal(err)
		}
		sameHits(t, fmt.Sprint("exhaustive query ", q), hits, bruteForce(t, st, c, query, nil, ScoreAvgMax)[:20])
	}
	fresh := openIndex(t, st, opts)
	if !fresh.DocNums().Equals(x.DocNums()) {
		t.Errorf("after the swap: %d documents, an index built from the store %d", x.DocNums().GetCardinality(), fresh.DocNums().GetCardinality())
	}
	// The codes taken from apply are those the job would have made from
	// the store.
	sameCodes(t, "after the swap, against every document coded from the store", residualOf(x), recodedFromStore(t, residualOf(x)))
}

// recodedFromStore codes every document f holds again, from its blob in
// the store, with f's codebook.
func recodedFromStore(t *testing.T, f *residualFamily) *residualFamily {
	t.Helper()
	next := newResidualIndex(f.rc.cb)
	gone, err := f.codeDelta(next, f.heldLocked(slices.Sorted(maps.Keys(f.rc.docs))))
	if err != nil || len(gone) > 0 {
		t.Fatalf("code from the store: %v (%d gone)", err, len(gone))
	}
	return &residualFamily{rc: next}
}

// checkEveryDocFound searches each document of c by its own tokens: it
// must come first, with score 1.
func checkEveryDocFound(t *testing.T, st *storage.Store, x *Index, c *synthCorpus) {
	t.Helper()
	for id, v := range c.vecs {
		num, ok, err := st.Lookup(id)
		if err != nil || !ok {
			t.Fatalf("lookup %s: %v %v", id, ok, err)
		}
		hits, err := x.Search(context.Background(), v, &SearchOptions{K: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) == 0 || hits[0].DocNum != num || math.Abs(float64(hits[0].Score)-1) > 1e-3 {
			t.Fatalf("document %s (%d) by its own tokens: hits %v", id, num, hits)
		}
	}
}

// TestRetrainCancelledByClose closes an index while a retraining is held:
// Close returns (cancelling it), the snapshot saved meanwhile holds the old
// codes, and the next Open loads it and retrains again in the background.
func TestRetrainCancelledByClose(t *testing.T) {
	ctx := context.Background()
	reached, release := holdRetrain(t)
	dir := t.TempDir()
	st := openStore(t, dir)
	opts := &Options{Model: testModel, Dim: 16, SnapshotEvery: -1, Description: "Residual"}
	x, err := Open(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	c := newSynth(1500, 16, 22)
	growToRetrain(t, st, x, c)
	waitReached(t, reached)
	before, _ := x.Stats()
	if err := x.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Stats(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Stats after Close: %v", err)
	}
	close(release)
	y := openIndex(t, st, opts)
	if !y.LoadedSnapshot() {
		t.Fatal("the snapshot saved while retraining was not loaded")
	}
	if err := y.WaitRetrain(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := y.Stats()
	if after.Retrains != 1 || after.Centroids <= before.Centroids || after.RetrainErr != nil {
		t.Fatalf("reopened: %+v, before close %+v: want the retraining done again", after, before)
	}
	checkEveryDocFound(t, st, y, c)
}
