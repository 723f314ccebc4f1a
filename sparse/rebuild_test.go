package sparse

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/storage"
)

// TestPersistedSeq follows SavedSeq through Bleve's background persister:
// never above AppliedSeq and never lower than before while batches are
// applied one at a time, equal to AppliedSeq once the persister has caught
// up with no further batch, after Close's flush, and at Open.
func TestPersistedSeq(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bleve")
	schema := tandem.DefaultSchema()
	schema.Fill()
	ctx := context.Background()
	x, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.SavedSeq() != 0 {
		t.Fatalf("new index: SavedSeq %d, want 0", x.SavedSeq())
	}
	var seq, saved uint64
	lagging := 0 // batches not yet on disk when Apply returned
	applyMany := func(n int) {
		t.Helper()
		for range n {
			seq++
			d := tandem.Doc{ID: fmt.Sprint("d", seq), Fields: map[string]any{"text": fmt.Sprint("word", seq%7, " other", seq)}}
			if err := x.Apply(ctx, schema, []storage.Change{{Seq: seq, Op: storage.OpPut, DocNum: seq, ID: d.ID, Doc: &d}}); err != nil {
				t.Fatal(err)
			}
			s, a := x.SavedSeq(), x.AppliedSeq()
			if s > a || s < saved || a != seq {
				t.Fatalf("after applying %d: SavedSeq %d, AppliedSeq %d (SavedSeq was %d)", seq, s, a, saved)
			}
			saved = s
			if s < a {
				lagging++
			}
		}
	}
	applyMany(200)
	// How far the persister lags depends on the disk, so it is only
	// reported.
	t.Logf("SavedSeq behind AppliedSeq after %d of 200 batches", lagging)
	// Nothing more is applied: the persister writes what is left.
	deadline := time.Now().Add(30 * time.Second)
	for x.SavedSeq() != seq {
		if time.Now().After(deadline) {
			t.Fatalf("SavedSeq %d 30 s after the last batch, want %d", x.SavedSeq(), seq)
		}
		time.Sleep(5 * time.Millisecond)
	}
	applyMany(200)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if x.SavedSeq() != seq {
		t.Errorf("after Close: SavedSeq %d, want %d", x.SavedSeq(), seq)
	}
	x, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.AppliedSeq() != seq || x.SavedSeq() != seq {
		t.Errorf("reopened: AppliedSeq %d, SavedSeq %d; want %d", x.AppliedSeq(), x.SavedSeq(), seq)
	}
	if n, err := x.DocCount(); err != nil || n != seq {
		t.Errorf("reopened: %d documents (%v), want %d", n, err, seq)
	}
}
