package storage

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/tandemsearch/tandem"
)

// TestDiskReserve: a write that would leave less than the reserve free is
// refused with ErrDiskFull (ENOSPC) and stores nothing, and so is a
// snapshot's commit; the previous state stays readable.
func TestDiskReserve(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	b.Put(tandem.Doc{ID: "a", Fields: map[string]any{"text": "kept"}}, nil)
	if _, err := st.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	save := func(s *Store) error {
		return s.SaveSnapshot(context.Background(), "x", s.LastSeq(), func(w io.Writer) error {
			_, err := w.Write([]byte("snapshot"))
			return err
		})
	}
	if err := save(st); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = Open(dir, &Options{NoSync: true, DiskReserve: 1 << 62}) // more than any disk
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b = Batch{}
	b.Put(tandem.Doc{ID: "b", Fields: map[string]any{"text": "refused"}}, nil)
	if _, err := st.Write(context.Background(), &b); !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write over the reserve: %v", err)
	}
	if st.Count() != 1 || st.LastSeq() != 1 {
		t.Errorf("after a refused write: %d documents, last sequence %d", st.Count(), st.LastSeq())
	}
	if _, ok, err := st.Lookup("b"); ok || err != nil {
		t.Errorf("the refused document is stored: %v %v", ok, err)
	}
	if err := save(st); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("snapshot over the reserve: %v", err)
	}
	rc, seq, err := st.OpenSnapshot("x")
	if err != nil || seq != 1 {
		t.Fatalf("the previous snapshot: seq %d, %v", seq, err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "snapshot" {
		t.Errorf("previous snapshot reads %q", got)
	}
}
