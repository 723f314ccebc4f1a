package dense

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/internal/testtime"
	"github.com/tandemsearch/tandem/storage"
)

// holdRetrain sets retrainHook so that a job stops in phase until release
// is closed; reached is closed when it gets there. The hook is removed at
// the end of the test.
func holdRetrain(t *testing.T, phase string) (reached, release chan struct{}) {
	t.Helper()
	reached, release = make(chan struct{}), make(chan struct{})
	var once bool
	retrainHook = func(ctx context.Context, p string) {
		if p != phase || once {
			return
		}
		once = true
		close(reached)
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	t.Cleanup(func() { retrainHook = nil })
	return reached, release
}

// within fails the test unless f returns within the scaled timeout.
func within(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(testtime.D(30 * time.Second)):
		t.Fatalf("%s: still waiting after %v while the retraining is held", what, testtime.D(30*time.Second))
	}
}

// writeChanges puts n new documents from first, replaces the vectors of
// every 3rd of the first m existing ones and deletes every 7th.
func writeChanges(t *testing.T, st *storage.Store, s *synth, first, n, m int) {
	t.Helper()
	putVectors(t, st, first, s.many(n))
	var b storage.Batch
	for i := 0; i < m; i++ {
		switch {
		case i%7 == 0:
			b.Delete(docID(i))
		case i%3 == 0:
			b.Put(tandem.Doc{ID: docID(i), Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): EncodeVector(s.next())})
		}
	}
	if _, err := st.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
}

// TestRetrainDoesNotBlock holds a retraining in each of its phases and
// checks that searches (plain, filtered, exact) and writes (inserts,
// updates, deletes, more than lastPassDocs of them) complete meanwhile, on
// the index in use; that Stats reports the retraining; and that once it
// ends the new index holds exactly what storage holds.
func TestRetrainDoesNotBlock(t *testing.T) {
	for _, phase := range []string{"sample", "train", "fill", "catch up"} {
		t.Run(phase, func(t *testing.T) {
			ctx := testtime.Context(t)
			st := openStore(t, t.TempDir())
			s := newSynth(32, 8, 21)
			x, err := Open(ctx, st, &Options{Model: testModel, Dim: 32, ExactBelow: 2000, SnapshotEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			putVectors(t, st, 0, s.many(1500))
			catchUp(t, st, x)
			if d := x.Stats().Description; d != "Flat" {
				t.Fatalf("1500 vectors under ExactBelow 2000: %s, want Flat", d)
			}
			reached, release := holdRetrain(t, phase)
			putVectors(t, st, 1500, s.many(1000)) // crosses ExactBelow
			within(t, "Apply crossing ExactBelow", func() error { catchUp(t, st, x); return nil })
			select {
			case <-reached:
			case <-time.After(testtime.D(30 * time.Second)):
				t.Fatalf("the retraining never reached %q", phase)
			}
			if s := x.Stats(); !s.Retraining || s.RetrainPhase != phase || s.Description != "Flat" || s.Retrains != 1 || s.RetrainTarget != 2500 {
				t.Fatalf("held in %s: stats %+v, want retraining in that phase towards 2500 vectors, Flat in use", phase, s)
			}
			q := s.next()
			allow := roaring64.New()
			allow.AddRange(0, 300)
			within(t, "searches", func() error {
				if hits, err := x.Search(ctx, q, 10, nil); err != nil || len(hits) != 10 {
					return fmt.Errorf("search: %d hits, %v", len(hits), err)
				}
				if hits, err := x.Search(ctx, q, 10, allow); err != nil || len(hits) != 10 {
					return fmt.Errorf("filtered search: %d hits, %v", len(hits), err)
				}
				_, err := x.SearchExact(ctx, q, 10, nil)
				return err
			})
			// Writes, more than the last pass takes under wmu: the job
			// catches them up in a pass off the lock first.
			within(t, "writes", func() error {
				writeChanges(t, st, s, 2500, lastPassDocs+500, 2500)
				catchUp(t, st, x)
				return nil
			})
			if s := x.Stats(); !s.Retraining || s.Description != "Flat" {
				t.Fatalf("still held: stats %+v", s)
			}
			checkAgrees(t, st, x) // the index in use follows the writes
			close(release)
			if err := x.WaitRetrain(ctx); err != nil {
				t.Fatal(err)
			}
			s1 := x.Stats()
			if s1.Retraining || !strings.HasPrefix(s1.Description, "IVF") || s1.RetrainError != "" {
				t.Fatalf("after the retraining: stats %+v, want IVF in use", s1)
			}
			checkAgrees(t, st, x)
			// The index now in use takes writes as usual.
			writeChanges(t, st, s, 10_000, 100, 400)
			catchUp(t, st, x)
			checkAgrees(t, st, x)
		})
	}
}

// TestRetrainLastPassBlocksWritersOnly holds the job just before its swap,
// holding wmu: a search completes, an Apply waits for the swap.
func TestRetrainLastPassBlocksWritersOnly(t *testing.T) {
	ctx := testtime.Context(t)
	st := openStore(t, t.TempDir())
	s := newSynth(32, 8, 22)
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 32, ExactBelow: 1000, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	putVectors(t, st, 0, s.many(900))
	catchUp(t, st, x)
	reached, release := holdRetrain(t, "swap")
	putVectors(t, st, 900, s.many(300))
	catchUp(t, st, x)
	<-reached
	within(t, "search during the last pass", func() error {
		_, err := x.Search(ctx, s.next(), 5, nil)
		return err
	})
	putVectors(t, st, 1200, s.many(10))
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		catchUp(t, st, x)
	}()
	select {
	case <-applied:
		t.Fatal("Apply completed while the retraining's last pass held the writers' lock")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-applied
	if err := x.WaitRetrain(ctx); err != nil {
		t.Fatal(err)
	}
	if d := x.Stats().Description; !strings.HasPrefix(d, "IVF") {
		t.Fatalf("after the swap: %s", d)
	}
	checkAgrees(t, st, x)
}

// TestRetrainClose closes the index while its retraining is held in each
// phase: Close returns, and a reopened index agrees with storage and
// retrains again.
func TestRetrainClose(t *testing.T) {
	for _, phase := range []string{"train", "fill", "catch up", "swap"} {
		t.Run(phase, func(t *testing.T) {
			ctx := testtime.Context(t)
			dir := t.TempDir()
			st := openStore(t, dir)
			s := newSynth(32, 8, 23)
			opts := &Options{Model: testModel, Dim: 32, ExactBelow: 1000, SnapshotEvery: -1}
			x, err := Open(ctx, st, opts)
			if err != nil {
				t.Fatal(err)
			}
			putVectors(t, st, 0, s.many(900))
			catchUp(t, st, x)
			if err := x.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
			reached, _ := holdRetrain(t, phase)
			putVectors(t, st, 900, s.many(300))
			catchUp(t, st, x)
			<-reached
			within(t, "Close during "+phase, x.Close)
			if err := x.WaitRetrain(ctx); !errors.Is(err, ErrClosed) {
				t.Fatalf("WaitRetrain after Close: %v, want ErrClosed", err)
			}
			retrainHook = nil
			x2, err := Open(ctx, st, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer x2.Close()
			if err := x2.WaitRetrain(ctx); err != nil {
				t.Fatal(err)
			}
			if s := x2.Stats(); !strings.HasPrefix(s.Description, "IVF") || s.Retrains != 1 {
				t.Fatalf("reopened: %+v, want IVF after one retraining", s)
			}
			checkAgrees(t, st, x2)
		})
	}
}

// TestRetrainAgreesWithRebuild grows an index past ExactBelow and then
// fourfold, with updates and deletes while each retraining runs, and
// compares its searches with an index built by Open from the same storage:
// both IVF-SQ8 over the same vectors, each with recall@10 at least 0.9
// against exact search.
func TestRetrainAgreesWithRebuild(t *testing.T) {
	ctx := testtime.Context(t)
	st := openStore(t, t.TempDir())
	s := newSynth(32, 16, 24)
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 32, ExactBelow: 1000, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	next := 0
	for round := 0; round < 6; round++ {
		n := 800 << round / 2
		putVectors(t, st, next, s.many(n))
		next += n
		catchUp(t, st, x)
		writeChanges(t, st, s, next, 50, next/2)
		next += 50
		catchUp(t, st, x)
	}
	if err := x.WaitRetrain(ctx); err != nil {
		t.Fatal(err)
	}
	catchUp(t, st, x) // a retyping the last swap left due
	if err := x.WaitRetrain(ctx); err != nil {
		t.Fatal(err)
	}
	checkAgrees(t, st, x)
	fresh, err := Open(ctx, st, &Options{Model: testModel, Dim: 32, ExactBelow: 1000, SnapshotEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	sx, sf := x.Stats(), fresh.Stats()
	// The list counts may differ: a job sizes them by the vectors held
	// when it started.
	ivfSQ8 := func(d string) bool { return strings.HasPrefix(d, "IVF") && strings.HasSuffix(d, ",SQ8") }
	if !ivfSQ8(sx.Description) || !ivfSQ8(sf.Description) || sx.Vectors != sf.Vectors || sx.Retrains < 2 {
		t.Fatalf("retrained in the background: %+v; built by Open: %+v", sx, sf)
	}
	var rx, rf float64
	const nq = 40
	for range nq {
		q := s.next()
		want, err := x.SearchExact(ctx, q, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := x.Search(ctx, q, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := fresh.Search(ctx, q, 10, nil)
		if err != nil {
			t.Fatal(err)
		}
		rx += recall(got, want)
		rf += recall(ref, want)
	}
	rx, rf = rx/nq, rf/nq
	t.Logf("%s over %d vectors after %d retrainings: recall@10 %.3f; built by Open: %.3f", sx.Description, sx.Vectors, sx.Retrains, rx, rf)
	if rx < 0.9 || rf < 0.9 {
		t.Errorf("recall@10: retrained %.3f, built by Open %.3f, want both at least 0.9", rx, rf)
	}
}
