package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/storage"
)

// bm25Rankings runs a few text searches with BM25 over every document
// and returns each one's hits as id:score, sorted, compared as a set, each
// with its exact score.
func bm25Rankings(t *testing.T, e *Engine) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, q := range []string{"alpha bravo", "quartz reef saffron", "ember", "doc d000007"} {
		res, err := e.Search(context.Background(), Request{Text: q, K: 1000, Retrievers: []string{"bm25"}})
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, h := range res.Hits {
			parts = append(parts, h.ID+":"+strconv.FormatFloat(h.Score, 'g', -1, 64))
		}
		slices.Sort(parts)
		out[q] = strings.Join(parts, " ")
	}
	return out
}

// upsertAndDelete writes rounds of new documents, replacements of the
// first ones and deletions of a few, recording what is acknowledged.
func upsertAndDelete(t *testing.T, c *faultCollection, e *Engine, rounds int) {
	t.Helper()
	for r := range rounds {
		if err := c.write(e, 5, 25); err != nil {
			t.Fatal(err)
		}
		id := faultDoc(30+r, 0).ID
		if _, err := e.Delete(context.Background(), []string{id}); err != nil {
			t.Fatal(err)
		}
		delete(c.acked, id)
	}
}

// TestLogTruncation checks that the change log is truncated below the
// lowest sequence every derived index has saved: while the models'
// indexes have no snapshot they hold it (Stats names them), a Close that
// saves every index truncates the whole log, and writes after that keep
// only their own entries. Rankings are the same across the truncation.
func TestLogTruncation(t *testing.T) {
	ctx := context.Background()
	c := newFaultCollection(t, "", nil)
	c.opts.TruncateEvery = 1
	e := c.open()
	if err := c.write(e, 60, 0); err != nil {
		t.Fatal(err)
	}
	upsertAndDelete(t, c, e, 20)
	s, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Log.Floor != 0 || s.Log.Entries != s.LastSeq || !strings.Contains(s.Log.HeldBy, faultModel) {
		t.Fatalf("before any snapshot: log %+v (last %d); want nothing truncated, held by a model's index", s.Log, s.LastSeq)
	}
	wantExact, wantBM25 := exactRankings(t, e, c.acked), bm25Rankings(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = c.open()
	defer func() { e.Close() }()
	s, err = e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Log.Floor != s.LastSeq || s.Log.Entries != 0 || s.Log.Oldest != 0 {
		t.Fatalf("after a Close that saved every index: log %+v, last %d; want it truncated through the last sequence", s.Log, s.LastSeq)
	}
	for name, seq := range s.SavedSeq {
		if seq != s.LastSeq {
			t.Errorf("%s saved through %d, want %d", name, seq, s.LastSeq)
		}
	}
	if _, err := e.st.Changes(ctx, s.Log.Floor-1, 10); !errors.Is(err, storage.ErrTruncated) {
		t.Fatalf("changes below the floor: %v, want ErrTruncated", err)
	}
	checkConsistent(t, e, c.acked)
	compareRankings(t, exactRankings(t, e, c.acked), wantExact)
	compareRankings(t, bm25Rankings(t, e), wantBM25)
	before := s.LastSeq
	upsertAndDelete(t, c, e, 3)
	s, err = e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Log.Floor < before || s.Log.Entries != s.LastSeq-s.Log.Floor {
		t.Fatalf("after more writes: log %+v, last %d; want the floor at least %d", s.Log, s.LastSeq, before)
	}
	checkConsistent(t, e, c.acked)
}

// TestRebuildAfterTruncation deletes every derived index's files after
// the log was truncated: BM25 rebuilds from the stored documents, dense
// and late interaction from the stored vectors, and every ranking is the
// same as before (issue #32, acceptance 1).
func TestRebuildAfterTruncation(t *testing.T) {
	c := newFaultCollection(t, "", nil)
	c.opts.TruncateEvery = 1
	e := c.open()
	if err := c.write(e, 80, 0); err != nil {
		t.Fatal(err)
	}
	upsertAndDelete(t, c, e, 15)
	wantExact, wantBM25 := exactRankings(t, e, c.acked), bm25Rankings(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"bleve", "snapshots"} {
		if err := os.RemoveAll(filepath.Join(c.dir, part)); err != nil {
			t.Fatal(err)
		}
	}
	e = c.open()
	defer func() { e.Close() }()
	s, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Log.Floor == 0 || s.BleveDocs != s.Docs {
		t.Fatalf("reopened without derived files: log %+v, %d documents in Bleve of %d", s.Log, s.BleveDocs, s.Docs)
	}
	if d, l := snapshotsLoaded(e); d || l {
		t.Fatalf("snapshots loaded (dense %v, late %v) after their files were deleted", d, l)
	}
	checkConsistent(t, e, c.acked)
	compareRankings(t, exactRankings(t, e, c.acked), wantExact)
	compareRankings(t, bm25Rankings(t, e), wantBM25)
}

// TestStaleBleveBehindFloor puts back a copy of the Bleve index taken
// before documents were deleted and the log truncated past it: BM25 must
// not catch up over the gap (which would keep the deleted documents), but
// rebuild from the stored documents.
func TestStaleBleveBehindFloor(t *testing.T) {
	c := newFaultCollection(t, "", nil)
	c.opts.TruncateEvery = 1
	e := c.open()
	if err := c.write(e, 60, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(t.TempDir(), "bleve")
	if err := os.CopyFS(stale, os.DirFS(filepath.Join(c.dir, "bleve"))); err != nil {
		t.Fatal(err)
	}
	e = c.open()
	upsertAndDelete(t, c, e, 10)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(c.dir, "bleve")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(c.dir, "bleve"), os.DirFS(stale)); err != nil {
		t.Fatal(err)
	}
	e = c.open()
	defer func() { e.Close() }()
	checkConsistent(t, e, c.acked)
}

// TestAttachBehindFloor checks that an index attached after the log was
// truncated, which cannot rebuild from the documents, is refused with an
// error that says so.
func TestAttachBehindFloor(t *testing.T) {
	c := newFaultCollection(t, "", nil)
	c.opts.TruncateEvery = 1
	e := c.open()
	if err := c.write(e, 20, 0); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e = c.open()
	defer e.Close()
	// liveSet has neither SavedSeq nor Rebuild.
	err := e.Attach(context.Background(), &liveSet{live: map[uint64]string{}})
	if !errors.Is(err, storage.ErrTruncated) || !strings.Contains(err.Error(), "cannot rebuild from the documents") {
		t.Fatalf("Attach after truncation: %v", err)
	}
}
