package engine

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tandemsearch/tandem"
)

// docStates maps each id to what identifies its version (its text).
func docStates(docs map[string]tandem.Doc) map[string]string {
	out := make(map[string]string, len(docs))
	for id, d := range docs {
		out[id] = d.Fields["text"].(string)
	}
	return out
}

// storedStates reads every document of e's store.
func storedStates(t *testing.T, e *Engine) (map[string]string, map[string]tandem.Doc) {
	t.Helper()
	states, docs := map[string]string{}, map[string]tandem.Doc{}
	if err := e.st.ScanDocs(context.Background(), func(_ uint64, d tandem.Doc) error {
		states[d.ID] = d.Fields["text"].(string)
		docs[d.ID] = d
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return states, docs
}

// TestBackupWhileWriting takes a backup while a writer upserts and
// deletes, restores it into a new directory and checks that the restored
// collection is the state after one of the acknowledged writes, document
// for document, and ranks exactly as a collection built from that
// state's documents (issue #32, acceptance 2).
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	c := newFaultCollection(t, "", nil)
	e := c.open()
	defer func() { e.Close() }()
	if err := c.write(e, 80, 0); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	states := []map[string]string{docStates(c.acked)}
	snaps := []map[string]tandem.Doc{maps.Clone(c.acked)}
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for r := range 60 {
			if r == 5 {
				close(started)
			}
			if err := c.write(e, 3, 10); err != nil {
				done <- err
				return
			}
			mu.Lock()
			states, snaps = append(states, docStates(c.acked)), append(snaps, maps.Clone(c.acked))
			mu.Unlock()
			id := faultDoc(20+r, 0).ID
			if _, err := e.Delete(ctx, []string{id}); err != nil {
				done <- err
				return
			}
			delete(c.acked, id)
			mu.Lock()
			states, snaps = append(states, docStates(c.acked)), append(snaps, maps.Clone(c.acked))
			mu.Unlock()
		}
		done <- nil
	}()
	<-started
	path := filepath.Join(t.TempDir(), "c.tandembackup")
	info, err := e.BackupFile(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if checked, err := CheckBackup(path); err != nil || checked != info {
		t.Fatalf("CheckBackup: %+v, %v; Backup said %+v", checked, err, info)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := Restore(path, dir); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, _ := storedStates(t, r)
	at := -1
	for i, s := range states {
		if maps.Equal(s, got) {
			at = i
		}
	}
	if at < 0 {
		t.Fatalf("the restored collection's %d documents are no acknowledged state (the writer acknowledged %d)", len(got), len(states))
	}
	// The restored state is one that was acknowledged (each write below
	// is one atomic batch), and its documents rank as they do in a
	// collection built from them alone.
	t.Logf("restored the state after write %d of %d: %d documents, %d bytes", at, len(states)-1, len(got), info.Bytes)
	want := snaps[at]
	checkConsistent(t, r, want)
	ref := newFaultCollection(t, "", nil)
	re := ref.open()
	defer re.Close()
	var docs []tandem.Doc
	for _, d := range want {
		docs = append(docs, d)
	}
	if _, err := re.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	compareRankings(t, exactRankings(t, r, want), exactRankings(t, re, want))
	compareRankings(t, bm25Rankings(t, r), bm25Rankings(t, re))
}

// TestRestoreRefusesDamage damages a backup in its data, its trailer and
// its length, and checks that Restore refuses each with an error saying
// so, before creating anything.
func TestRestoreRefusesDamage(t *testing.T) {
	ctx := context.Background()
	c := newFaultCollection(t, "", nil)
	e := c.open()
	if err := c.write(e, 30, 0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "b")
	if _, err := e.BackupFile(ctx, path); err != nil {
		t.Fatal(err)
	}
	e.Close()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"a flipped byte in the data", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, "SHA-256"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-100] }, "truncated"},
		{"a flipped byte in the length", func(b []byte) []byte { b[len(b)-backupTrailer] ^= 1; return b }, "trailer says"},
		{"not a backup", func(b []byte) []byte { return []byte("hello") }, "not a Tandem backup"},
	} {
		bad := filepath.Join(t.TempDir(), "bad")
		if err := os.WriteFile(bad, tc.edit(append([]byte(nil), good...)), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "into")
		_, err := Restore(bad, dir)
		if !errors.Is(err, ErrBadBackup) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrBadBackup saying %q", tc.name, err, tc.want)
		}
		if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: the refused restore left %s (%v)", tc.name, dir, serr)
		}
	}
	// The intact backup restores, and not over a collection.
	dir := filepath.Join(t.TempDir(), "into")
	if _, err := Restore(path, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(path, dir); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restoring over a collection: %v", err)
	}
	r, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	checkConsistent(t, r, c.acked)
}
