package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOpenAfterKillInLogCreation reproduces what tandem torture found: Badger
// creates each value-log (and memtable) file empty, then sizes it and writes
// its header, and it creates a new value log at every Open. A process killed
// in between leaves an empty file, and Badger v4 then refused to open the
// store ("Open existing file ... Create a new file"). The store must open,
// with everything it held.
func TestOpenAfterKillInLogCreation(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.Put(doc("a", "alpha"), map[string][]byte{"vec/m": {1, 2}})
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The files a kill between creating and sizing leaves: the next value
	// log and the next memtable, both empty.
	bdir := filepath.Join(dir, "badger")
	next := func(ext string) int {
		entries, err := os.ReadDir(bdir)
		if err != nil {
			t.Fatal(err)
		}
		fid := 0
		for _, e := range entries {
			if n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ext)); err == nil && strings.HasSuffix(e.Name(), ext) {
				fid = max(fid, n)
			}
		}
		return fid + 1
	}
	for _, name := range []string{fmt.Sprintf("%06d.vlog", next(".vlog")), fmt.Sprintf("%05d.mem", next(".mem"))} {
		if err := os.WriteFile(filepath.Join(bdir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("open after a kill in log creation: %v", err)
	}
	defer s.Close()
	num, ok, err := s.Lookup("a")
	if err != nil || !ok {
		t.Fatalf("lookup a: %v %v", ok, err)
	}
	if v, ok, err := s.Blob(num, "vec/m"); err != nil || !ok || len(v) != 2 {
		t.Errorf("blob of a: %v %v %v", v, ok, err)
	}
	b = Batch{}
	b.Put(doc("b", "beta"), nil)
	if _, err := s.Write(ctx, &b); err != nil {
		t.Errorf("write after reopening: %v", err)
	}
}
