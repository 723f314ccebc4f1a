package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/tandemsearch/tandem"
)

// TestMarkBackupRestore checks that a mark commits with its batch, that
// a backup taken while batches commit holds one committed state (its
// documents are exactly those the batches up to its mark wrote) and that
// Restore makes a store of it with the same documents, blobs, change log
// and schema.
func TestMarkBackupRestore(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	if _, ok, err := s.Mark("applied"); err != nil || ok {
		t.Fatalf("Mark before any batch = %v, %v; want none", ok, err)
	}
	write := func(i int) {
		var b Batch
		b.Put(doc(fmt.Sprintf("d%d", i), fmt.Sprintf("text %d", i)), map[string][]byte{"vec/m": {byte(i)}})
		if i%5 == 4 {
			b.Delete(fmt.Sprintf("d%d", i-2))
		}
		b.SetMark("applied", binary.BigEndian.AppendUint64(nil, uint64(i)))
		if _, err := s.Write(ctx, &b); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		write(i)
	}
	// A batch of marks alone commits too.
	var empty Batch
	empty.SetMark("other", []byte("x"))
	if _, err := s.Write(ctx, &empty); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Mark("other"); err != nil || !ok || string(v) != "x" {
		t.Fatalf("Mark(other) = %q, %v, %v", v, ok, err)
	}

	// Back up while batches 50..299 commit.
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 50; i < 300; i++ {
			write(i)
		}
	})
	var buf bytes.Buffer
	if err := s.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	dir := t.TempDir()
	if err := Restore(dir, &buf, nil); err != nil {
		t.Fatal(err)
	}
	if err := Restore(dir, bytes.NewReader(nil), nil); err == nil {
		t.Error("Restore into a directory holding a store succeeded")
	}
	r := openTest(t, filepath.Join(dir))
	v, ok, err := r.Mark("applied")
	if err != nil || !ok {
		t.Fatalf("restored Mark = %v, %v", ok, err)
	}
	last := int(binary.BigEndian.Uint64(v))
	if last < 49 || last >= 300 {
		t.Fatalf("restored mark %d, want 49..299", last)
	}
	// The restored store is exactly the source after batch last.
	want := map[string]bool{}
	for i := 0; i <= last; i++ {
		want[fmt.Sprintf("d%d", i)] = true
		if i%5 == 4 {
			delete(want, fmt.Sprintf("d%d", i-2))
		}
	}
	got := map[string]bool{}
	if err := r.ScanDocs(ctx, func(num uint64, d tandem.Doc) error {
		got[d.ID] = true
		b, ok, err := r.Blob(num, "vec/m")
		if err != nil || !ok || len(b) != 1 {
			return fmt.Errorf("blob of %s: %v %v %v", d.ID, b, ok, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("restored store holds %d documents, want %d (mark %d)", len(got), len(want), last)
	}
	for id := range want {
		if !got[id] {
			t.Errorf("restored store lacks %s (mark %d)", id, last)
		}
	}
	if r.Count() != uint64(len(want)) || r.LastSeq() == 0 {
		t.Errorf("restored Count %d, LastSeq %d; want %d documents", r.Count(), r.LastSeq(), len(want))
	}
	changes, err := r.Changes(ctx, 0, 1<<20)
	if err != nil || uint64(len(changes)) != r.LastSeq() {
		t.Errorf("restored change log has %d entries, LastSeq %d, err %v", len(changes), r.LastSeq(), err)
	}
	if r.Schema() == nil || len(r.Schema().Fields) != len(s.Schema().Fields) {
		t.Errorf("restored schema %+v, want %+v", r.Schema(), s.Schema())
	}
}

// TestRestoreClaimedLength: a backup whose list claims 8 GiB and holds a
// few bytes is refused as damaged, having allocated about what it holds,
// not what it claims.
func TestRestoreClaimedLength(t *testing.T) {
	body := binary.LittleEndian.AppendUint64(nil, 8<<30)
	body = append(body, "only these bytes"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := Restore(t.TempDir(), bytes.NewReader(body), &Options{NoSync: true})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("restore of a list claiming 8 GiB: %v, want ErrCorruption, cut short", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
		t.Errorf("the restore allocated %d MiB for 16 bytes of data", grew>>20)
	}
}
