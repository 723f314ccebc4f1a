package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/tandemsearch/tandem"
)

func doc(id, text string) tandem.Doc {
	return tandem.Doc{ID: id, Fields: map[string]any{"text": text}}
}

func openTest(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestWriteUpsertDeleteAndLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	var b Batch
	b.Put(doc("a", "alpha"), map[string][]byte{"vec/m": {1, 2}})
	b.Put(doc("b", "beta"), nil)
	b.Put(doc("c", "gamma"), map[string][]byte{"vec/m": {3}})
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	na, _, _ := s.Lookup("a")
	nc, _, _ := s.Lookup("c")

	// Upsert keeps the docnum and replaces the blobs; delete removes blobs.
	b = Batch{}
	b.Put(doc("a", "alpha two"), nil)
	b.Delete("c")
	b.Delete("nope")
	res, err := s.Write(ctx, &b)
	if err != nil {
		t.Fatal(err)
	}
	if res.Put != 1 || res.Deleted != 1 || res.LastSeq != 5 {
		t.Errorf("result = %+v, want 1 put, 1 deleted, last seq 5", res)
	}
	if n, ok, _ := s.Lookup("a"); !ok || n != na {
		t.Errorf("upsert moved a from docnum %d to %d", na, n)
	}
	if d, ok, _ := s.Get(na); !ok || d.Fields["text"] != "alpha two" {
		t.Errorf("Get(a) = %+v, %v", d, ok)
	}
	if _, ok, _ := s.Blob(na, "vec/m"); ok {
		t.Error("upsert without blobs kept the old blob")
	}
	if _, ok, _ := s.Blob(nc, "vec/m"); ok {
		t.Error("delete kept the blob")
	}
	if s.Count() != 2 {
		t.Errorf("Count = %d, want 2", s.Count())
	}

	changes, err := s.Changes(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.Op.String()+":"+c.ID)
	}
	want := []string{"put:a", "put:b", "put:c", "put:a", "delete:c"}
	if len(got) != len(want) {
		t.Fatalf("changes = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] || changes[i].Seq != uint64(i+1) {
			t.Errorf("change %d = %s seq %d, want %s seq %d", i, got[i], changes[i].Seq, want[i], i+1)
		}
	}
	if changes[2].Doc != nil {
		t.Error("put of a since-deleted doc carries a document")
	}
	if after, _ := s.Changes(ctx, 3, 1); len(after) != 1 || after[0].Seq != 4 {
		t.Errorf("Changes(3, 1) = %+v", after)
	}

	// Reopen: counters survive, a new document gets a fresh number.
	s.Close()
	s = openTest(t, dir)
	if s.LastSeq() != 5 || s.Count() != 2 {
		t.Errorf("after reopen: last seq %d count %d", s.LastSeq(), s.Count())
	}
	b = Batch{}
	b.Put(doc("c", "gamma again"), nil)
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := s.Lookup("c"); n <= nc {
		t.Errorf("re-added c got docnum %d, want a new one above %d", n, nc)
	}
}

func TestBadBatchStoresNothing(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	var b Batch
	b.Put(doc("a", "alpha"), nil)
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	b = Batch{}
	b.Put(doc("b", "beta"), nil)
	b.Delete("a")
	b.Put(tandem.Doc{ID: "c", Fields: map[string]any{"text": 42.0}}, nil)
	_, err := s.Write(ctx, &b)
	var be *BatchError
	if !errors.As(err, &be) || be.Index != 2 || be.ID != "c" || !errors.Is(err, tandem.ErrWrongType) {
		t.Fatalf("err = %v, want a BatchError at index 2 (id c) wrapping ErrWrongType", err)
	}
	if _, ok, _ := s.Lookup("b"); ok {
		t.Error("b stored from a rejected batch")
	}
	if _, ok, _ := s.Lookup("a"); !ok {
		t.Error("a deleted by a rejected batch")
	}
	if s.LastSeq() != 1 || s.Count() != 1 {
		t.Errorf("last seq %d count %d, want 1 and 1", s.LastSeq(), s.Count())
	}
}

func TestSchemaInferredAndPersisted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	var b Batch
	b.Put(tandem.Doc{ID: "1", Fields: map[string]any{"text": "x", "year": 2001.0}}, nil)
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, dir)
	if f, ok := s.Schema().Field("year"); !ok || f.Type != tandem.Number {
		t.Fatalf("year = %+v, %v after reopen", f, ok)
	}
	b = Batch{}
	b.Put(tandem.Doc{ID: "2", Fields: map[string]any{"text": "x", "year": "2001"}}, nil)
	if _, err := s.Write(ctx, &b); !errors.Is(err, tandem.ErrWrongType) {
		t.Errorf("year as a string: err = %v, want ErrWrongType", err)
	}
}

func TestSnapshot(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	if _, _, err := s.OpenSnapshot("faiss"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no snapshot: err = %v", err)
	}
	for i, payload := range [][]byte{bytes.Repeat([]byte{1}, 3<<20), []byte("second")} {
		if err := s.SaveSnapshot(ctx, "faiss", uint64(10+i), func(w io.Writer) error {
			_, err := w.Write(payload)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		rc, seq, err := s.OpenSnapshot("faiss")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if seq != uint64(10+i) || !bytes.Equal(got, payload) {
			t.Errorf("snapshot %d: seq %d, %d bytes", i, seq, len(got))
		}
	}
	// A failed write keeps the previous snapshot.
	err := s.SaveSnapshot(ctx, "faiss", 99, func(w io.Writer) error { return errors.New("boom") })
	if err == nil {
		t.Fatal("failed write: no error")
	}
	if _, seq, _ := s.OpenSnapshot("faiss"); seq != 11 {
		t.Errorf("after a failed save, seq = %d, want 11", seq)
	}
}

func TestClosed(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	var b Batch
	b.Put(doc("a", "x"), nil)
	if _, err := s.Write(context.Background(), &b); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if _, _, err := s.Get(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
}

func TestScanBlobs(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	var b Batch
	b.Put(doc("a", "x"), map[string][]byte{"vec/m": {1}, "tok/m": {9}})
	b.Put(doc("b", "y"), map[string][]byte{"vec/m": {2}})
	b.Put(doc("c", "z"), nil)
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := s.ScanBlobs(ctx, "vec/m", func(num uint64, v []byte) error {
		got = append(got, v...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte{1, 2}) {
		t.Errorf("ScanBlobs = %v, want [1 2]", got)
	}
	n := 0
	s.ScanDocs(ctx, func(uint64, tandem.Doc) error { n++; return nil })
	if n != 3 {
		t.Errorf("ScanDocs saw %d docs, want 3", n)
	}
}

func TestSameIDTwiceInOneBatch(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	var b Batch
	b.Put(doc("a", "one"), map[string][]byte{"vec/m": {1}})
	b.Put(doc("a", "two"), nil)
	b.Put(doc("b", "x"), nil)
	b.Delete("b")
	b.Put(doc("b", "y"), nil)
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if s.Count() != 2 {
		t.Errorf("count %d, want 2", s.Count())
	}
	na, _, _ := s.Lookup("a")
	if d, _, _ := s.Get(na); d.Fields["text"] != "two" {
		t.Errorf("a = %v, want the last put", d.Fields)
	}
	if _, ok, _ := s.Blob(na, "vec/m"); ok {
		t.Error("the second put of a kept the first put's blob")
	}
	nb, _, _ := s.Lookup("b")
	if nb == 1 {
		t.Error("b re-added after a delete in the same batch kept its old docnum")
	}
	n := 0
	s.ScanDocs(ctx, func(uint64, tandem.Doc) error { n++; return nil })
	if n != 2 {
		t.Errorf("%d documents stored, want 2", n)
	}
}

// TestLargeBlobsAndGC stores blobs on both sides of the value-log
// threshold, replaces and deletes some, runs the value-log GC and reopens:
// every live value reads back, and nothing deleted does.
func TestLargeBlobsAndGC(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	blob := func(i, size int) []byte {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(i + j)
		}
		return b
	}
	write := func(round int) {
		var b Batch
		for i := range 20 {
			b.Put(tandem.Doc{ID: fmt.Sprint("d", i), Fields: map[string]any{"text": "t"}},
				map[string][]byte{"small": blob(round+i, 100), "large": blob(round+i, 3*valueThreshold)})
		}
		if _, err := s.Write(ctx, &b); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	write(1) // replaces every blob
	var del Batch
	del.Delete("d3")
	if _, err := s.Write(ctx, &del); err != nil {
		t.Fatal(err)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.GC(); !errors.Is(err, ErrClosed) {
		t.Errorf("GC after Close: %v", err)
	}
	s = openTest(t, dir)
	for i := range 20 {
		num, ok, err := s.Lookup(fmt.Sprint("d", i))
		if i == 3 {
			if ok {
				t.Errorf("deleted d3 is back")
			}
			continue
		}
		if err != nil || !ok {
			t.Fatalf("d%d: %v %v", i, ok, err)
		}
		for name, size := range map[string]int{"small": 100, "large": 3 * valueThreshold} {
			v, ok, err := s.Blob(num, name)
			if err != nil || !ok || !bytes.Equal(v, blob(1+i, size)) {
				t.Errorf("d%d %s: %d bytes, %v %v", i, name, len(v), ok, err)
			}
		}
	}
}

// IDs, read from memory, agrees with the id keys on disk through puts,
// replaces, deletes, a re-added id, one batch that adds and deletes the
// same document, and a reopen.
func TestIDsInMemory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func(b *Batch) {
		t.Helper()
		if _, err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var b Batch
	for _, id := range []string{"a", "b", "c", "d"} {
		b.Put(doc(id, id), nil)
	}
	write(&b)
	b = Batch{}
	b.Put(doc("a", "again"), nil) // replace: same docnum
	b.Delete("b")
	b.Put(doc("e", "e"), nil)
	b.Delete("e") // added and deleted in one batch
	write(&b)
	b = Batch{}
	b.Put(doc("b", "back"), nil) // re-added: a new docnum
	write(&b)

	want := map[uint64]string{}
	for _, id := range []string{"a", "b", "c", "d"} {
		n, ok, err := s.Lookup(id)
		if err != nil || !ok {
			t.Fatalf("Lookup(%s) = %d %v %v", id, n, ok, err)
		}
		want[n] = id
	}
	nums := []uint64{0, 1, 2, 3, 4, 5, 6, 1 << 40}
	check := func(when string) {
		t.Helper()
		got, err := s.IDs(nums)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: IDs = %v, want %v", when, got, want)
		}
		for n, id := range want {
			if got[n] != id {
				t.Errorf("%s: IDs[%d] = %q, want %q", when, n, got[n], id)
			}
		}
	}
	check("after writes")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IDs(nums); !errors.Is(err, ErrClosed) {
		t.Errorf("IDs after Close: %v", err)
	}
	if s, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check("after reopening")
}
