package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupRestoreCommands backs a collection up, restores it into a new
// directory and searches both alike; a damaged backup is refused, naming
// the damage, and a restore over a collection is refused.
func TestBackupRestoreCommands(t *testing.T) {
	tmp := t.TempDir()
	dir, corpus := filepath.Join(tmp, "coll"), filepath.Join(tmp, "corpus.jsonl")
	os.WriteFile(corpus, []byte(`{"_id":"d1","text":"the whale swims north","_vectors":{"ext":{"dense":[1,0,0]}}}
{"_id":"d2","text":"a ship sails east","_vectors":{"ext":{"dense":[0,1,0]}}}
{"_id":"d3","text":"whale songs carry far","_vectors":{"ext":{"dense":[0,0.5,0.5]}}}
`), 0o644)
	if code, _, errs := tandemRun(t, "index", "--dir", dir, "--corpus", corpus, "--external", "ext:dense=3,similarity=dot"); code != 0 {
		t.Fatalf("index: %s", errs)
	}
	backup := filepath.Join(tmp, "coll.backup")
	if code, out, errs := tandemRun(t, "backup", "--dir", dir, "--out", backup); code != 0 || !strings.Contains(out, "SHA-256") {
		t.Fatalf("backup: code %d, out %q, err %q", code, out, errs)
	}
	restored := filepath.Join(tmp, "restored")
	if code, out, errs := tandemRun(t, "restore", "--from", backup, "--dir", restored); code != 0 || !strings.Contains(out, "restored") {
		t.Fatalf("restore: code %d, out %q, err %q", code, out, errs)
	}
	qv := filepath.Join(tmp, "q.json")
	os.WriteFile(qv, []byte(`[1, 0.2, 0]`), 0o644)
	for _, mode := range []string{"bm25", "hybrid"} {
		_, want, _ := tandemRun(t, "search", "--dir", dir, "--mode", mode, "--query-vector", qv, "whale")
		code, got, errs := tandemRun(t, "search", "--dir", restored, "--mode", mode, "--query-vector", qv, "whale")
		if code != 0 || got != want || !strings.Contains(got, "d1") {
			t.Errorf("%s search of the restored collection: code %d, %q (%s), want %q", mode, code, got, errs, want)
		}
	}
	if code, _, errs := tandemRun(t, "restore", "--from", backup, "--dir", restored); code == 0 || !strings.Contains(errs, "not empty") {
		t.Errorf("restore over a collection: code %d, stderr %q", code, errs)
	}
	b, _ := os.ReadFile(backup)
	b[len(b)/2] ^= 0xff
	os.WriteFile(backup, b, 0o644)
	other := filepath.Join(tmp, "other")
	if code, _, errs := tandemRun(t, "restore", "--from", backup, "--dir", other); code == 0 || !strings.Contains(errs, "damaged") {
		t.Errorf("restore of a damaged backup: code %d, stderr %q", code, errs)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("the refused restore created %s", other)
	}
	if code, _, errs := tandemRun(t, "backup", "--dir", dir); code == 0 || !strings.Contains(errs, "usage: tandem backup") {
		t.Errorf("backup without --out: code %d, stderr %q", code, errs)
	}
}
