package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/tandemsearch/tandem/internal/vfs"
)

// blobOf is version v of document i's blob of size bytes: its first 16
// bytes say which (i, v), the rest follows from them, so that a reader can
// tell a whole blob of some version from a wrong or torn one.
func blobOf(i, v, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b, uint64(i))
	binary.LittleEndian.PutUint64(b[8:], uint64(v))
	x := uint32(i*7919 + v*104729 + 1)
	for j := 16; j < size; j++ {
		x = x*1664525 + 1013904223
		b[j] = byte(x >> 24)
	}
	return b
}

// checkBlob reports whether b is a whole blobOf of document i, and which
// version.
func checkBlob(b []byte, i, size int) (int, bool) {
	if len(b) != size || len(b) < 16 || binary.LittleEndian.Uint64(b) != uint64(i) {
		return 0, false
	}
	v := int(binary.LittleEndian.Uint64(b[8:]))
	return v, bytes.Equal(b, blobOf(i, v, size))
}

const (
	bigBlob   = 40 << 10 // in a segment
	smallBlob = 512      // in Badger, below blobThreshold (a 128-d dense vector)
)

// smallSegments makes segments of size bytes for the test.
func smallSegments(t *testing.T, size int64) {
	old := segmentSize
	segmentSize = size
	t.Cleanup(func() { segmentSize = old })
}

// putDocs writes version v of documents ids, each with a large and a
// small blob.
func putDocs(t *testing.T, s *Store, v int, ids ...int) {
	t.Helper()
	var b Batch
	for _, i := range ids {
		b.Put(doc(fmt.Sprint("d", i), "text"), map[string][]byte{"tok/m": blobOf(i, v, bigBlob), "vec/m": blobOf(i, v, smallBlob)})
	}
	if _, err := s.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
}

// checkDocs checks that each document of want (id -> version, -1 for
// deleted) reads back whole through Blob, ReadBlob and ScanBlobs.
func checkDocs(t *testing.T, s *Store, want map[int]int) {
	t.Helper()
	buf := []byte("prefix")
	byNum := map[uint64]int{}
	for i, v := range want {
		num, ok, err := s.Lookup(fmt.Sprint("d", i))
		if err != nil {
			t.Fatal(err)
		}
		if v < 0 {
			if ok {
				t.Errorf("deleted d%d is back", i)
			}
			continue
		}
		if !ok {
			t.Fatalf("d%d is missing", i)
		}
		byNum[num] = i
		for name, size := range map[string]int{"tok/m": bigBlob, "vec/m": smallBlob} {
			b, ok, err := s.Blob(num, name)
			if got, whole := checkBlob(b, i, size); err != nil || !ok || !whole || got != v {
				t.Errorf("Blob(d%d, %s): version %d whole %v, %v %v; want version %d", i, name, got, whole, ok, err, v)
			}
			out, ok, err := s.ReadBlob(num, name, buf)
			if err != nil || !ok || !bytes.Equal(out[:len(buf)], buf) {
				t.Fatalf("ReadBlob(d%d, %s): %v %v, prefix %q", i, name, ok, err, out[:min(len(out), len(buf))])
			}
			if got, whole := checkBlob(out[len(buf):], i, size); !whole || got != v {
				t.Errorf("ReadBlob(d%d, %s): version %d whole %v, want version %d", i, name, got, whole, v)
			}
			out, crc, ok, err := s.ReadBlobCRC(num, name, buf)
			if err != nil || !ok || !bytes.Equal(out[:len(buf)], buf) {
				t.Fatalf("ReadBlobCRC(d%d, %s): %v %v, prefix %q", i, name, ok, err, out[:min(len(out), len(buf))])
			}
			if got, whole := checkBlob(out[len(buf):], i, size); !whole || got != v || crc != crc32.Checksum(out[len(buf):], castagnoli) {
				t.Errorf("ReadBlobCRC(d%d, %s): version %d whole %v, CRC %08x; want version %d, the blob's CRC-32C", i, name, got, whole, crc, v)
			}
		}
	}
	seen := 0
	if err := s.ScanBlobs(context.Background(), "tok/m", func(num uint64, b []byte) error {
		i, ok := byNum[num]
		if !ok {
			return fmt.Errorf("ScanBlobs: document %d is not live", num)
		}
		if got, whole := checkBlob(b, i, bigBlob); !whole || got != want[i] {
			return fmt.Errorf("ScanBlobs: d%d version %d whole %v, want %d", i, got, whole, want[i])
		}
		seen++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen != len(byNum) {
		t.Errorf("ScanBlobs saw %d blobs, want %d", seen, len(byNum))
	}
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// Large blobs go to segments and small ones stay in Badger; both read
// back whole, through a reopen, and ReadBlob appends to the caller's
// buffer.
func TestBlobSegmentsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	want := map[int]int{}
	for i := range 30 {
		want[i] = 0
	}
	putDocs(t, s, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	putDocs(t, s, 0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29)
	checkDocs(t, s, want)
	st := s.BlobStats()
	if st.Segments != 1 || st.Live != 30*bigBlob || st.Bytes != segmentHeader+30*bigBlob {
		t.Errorf("BlobStats = %+v, want 1 segment holding 30 blobs of %d bytes, all live", st, bigBlob)
	}
	if _, ok, err := s.ReadBlob(12345, "tok/m", nil); ok || err != nil {
		t.Errorf("ReadBlob of no document: %v %v", ok, err)
	}
	if out, crc, ok, err := s.ReadBlobCRC(12345, "tok/m", nil); ok || err != nil || crc != 0 || out != nil {
		t.Errorf("ReadBlobCRC of no document: %q, %08x, %v %v", out, crc, ok, err)
	}
	s.Close()
	s = openTest(t, dir)
	checkDocs(t, s, want)
	if got := s.BlobStats(); got != st {
		t.Errorf("after reopen BlobStats = %+v, want %+v", got, st)
	}
	// A write after reopening goes on in the same segment.
	putDocs(t, s, 1, 3)
	want[3] = 1
	checkDocs(t, s, want)
	if got := segmentFiles(t, dir); len(got) != 1 || got[0] != "000001.blob" {
		t.Errorf("segment files %v, want [000001.blob]", got)
	}
}

// Upserts and deletes leave garbage; GC compacts the segments that are
// at least half garbage, reclaims the space, and every live blob reads
// back byte for byte, before and after a reopen.
func TestBlobCompaction(t *testing.T) {
	smallSegments(t, 400<<10) // 10 blobs a segment
	dir := t.TempDir()
	s := openTest(t, dir)
	want := map[int]int{}
	for i := range 60 {
		putDocs(t, s, 0, i)
		want[i] = 0
	}
	full := s.BlobStats()
	if full.Segments != 6 {
		t.Fatalf("%d segments for 60 blobs of 40 KiB in 400 KiB segments, want 6", full.Segments)
	}
	// Replace documents 0-19 (the first two segments become garbage),
	// delete 20-25 (60% of the third), and 30-32 (30% of the fourth,
	// which stays).
	for i := range 20 {
		putDocs(t, s, 1, i)
		want[i] = 1
	}
	var b Batch
	for _, i := range []int{20, 21, 22, 23, 24, 25, 30, 31, 32} {
		b.Delete(fmt.Sprint("d", i))
		want[i] = -1
	}
	if _, err := s.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	before := s.BlobStats()
	if before.Live != 51*bigBlob {
		t.Errorf("before GC, %d live bytes, want %d", before.Live, 51*bigBlob)
	}
	disk := diskBytes(t, filepath.Join(dir, "blobs"))
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	after := s.BlobStats()
	// Segments 1-3 go; their 4 live blobs move to a new one.
	wantBytes := before.Bytes - 3*(segmentHeader+10*bigBlob) + segmentHeader + 4*bigBlob
	if after.Live != before.Live || after.Bytes != wantBytes {
		t.Errorf("GC: %+v -> %+v; want the live bytes kept, %d bytes in all", before, after, wantBytes)
	}
	if d := diskBytes(t, filepath.Join(dir, "blobs")); d != after.Bytes || d >= disk {
		t.Errorf("segments take %d bytes on disk after GC (%d before), BlobStats says %d", d, disk, after.Bytes)
	}
	files := segmentFiles(t, dir)
	for _, f := range []string{"000001.blob", "000002.blob", "000003.blob"} {
		if slices.Contains(files, f) {
			t.Errorf("compacted segment %s is still there: %v", f, files)
		}
	}
	if !slices.Contains(files, "000004.blob") {
		t.Errorf("segment 4, 30%% garbage, was compacted: %v", files)
	}
	checkDocs(t, s, want)
	if after.Compacted != 3 {
		t.Errorf("%d segments compacted, want 3", after.Compacted)
	}
	s.Close()
	s = openTest(t, dir)
	checkDocs(t, s, want)
	after.Compacted = 0 // since Open
	if got := s.BlobStats(); got != after {
		t.Errorf("after reopen BlobStats = %+v, want %+v", got, after)
	}
	// A second GC finds nothing to do.
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if got := s.BlobStats(); got != after {
		t.Errorf("a second GC changed %+v to %+v", after, got)
	}
}

// A BlobReader reads the store as it was when opened: a later write does
// not show, and a segment compacted while it is open stays readable until
// it closes, then goes. Its CRCs are the blobs'. Reads after its Close or
// the store's fail.
func TestBlobReader(t *testing.T) {
	smallSegments(t, 400<<10) // 10 blobs a segment
	dir := t.TempDir()
	s := openTest(t, dir)
	for i := range 10 {
		putDocs(t, s, 0, i)
	}
	nums := map[int]uint64{}
	for i := range 10 {
		num, _, err := s.Lookup(fmt.Sprint("d", i))
		if err != nil {
			t.Fatal(err)
		}
		nums[i] = num
	}
	r, err := s.NewBlobReader()
	if err != nil {
		t.Fatal(err)
	}
	// Every blob replaced: segment 1 is all garbage, and GC compacts it.
	for i := range 10 {
		putDocs(t, s, 1, i)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if st := s.BlobStats(); st.Compacted != 1 {
		t.Fatalf("BlobStats %+v: want segment 1 compacted", st)
	}
	if !slices.Contains(segmentFiles(t, dir), "000001.blob") {
		t.Error("a segment the open reader may read was removed")
	}
	buf := []byte("prefix")
	for i := range 10 {
		for name, size := range map[string]int{"tok/m": bigBlob, "vec/m": smallBlob} {
			out, crc, ok, err := r.ReadBlobCRC(nums[i], name, buf)
			if err != nil || !ok || !bytes.Equal(out[:len(buf)], buf) {
				t.Fatalf("reader: d%d %s: %v %v", i, name, ok, err)
			}
			if v, whole := checkBlob(out[len(buf):], i, size); !whole || v != 0 || crc != crc32.Checksum(out[len(buf):], castagnoli) {
				t.Errorf("reader: d%d %s: version %d whole %v CRC %08x; want version 0, as when it opened, and its CRC", i, name, v, whole, crc)
			}
		}
	}
	if _, _, ok, err := r.ReadBlobCRC(12345, "tok/m", nil); ok || err != nil {
		t.Errorf("reader: no document: %v %v", ok, err)
	}
	r.Close()
	r.Close()
	if slices.Contains(segmentFiles(t, dir), "000001.blob") {
		t.Error("the compacted segment outlived the reader")
	}
	if _, _, _, err := r.ReadBlobCRC(nums[0], "tok/m", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("read after Close: %v, want ErrClosed", err)
	}
	want := map[int]int{}
	for i := range 10 {
		want[i] = 1
	}
	checkDocs(t, s, want)
	// A reader does not hold the store open: Close goes ahead, and the
	// reader's reads then fail.
	r, err = s.NewBlobReader()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, _, _, err := r.ReadBlobCRC(nums[0], "tok/m", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("read after the store closed: %v, want ErrClosed", err)
	}
	r.Close()
	if _, err := s.NewBlobReader(); !errors.Is(err, ErrClosed) {
		t.Errorf("NewBlobReader on a closed store: %v, want ErrClosed", err)
	}
}

// A crash between a batch's append to its segment and its commit leaves
// unreferenced bytes: reopening loses nothing acknowledged, counts the
// tail as garbage, removes a segment nothing refers to, and GC reclaims
// the tail.
func TestBlobCrashBeforeCommit(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	want := map[int]int{}
	for i := range 8 {
		putDocs(t, s, 0, i)
		want[i] = 0
	}
	// The batch appends and syncs its blobs; the process dies before the
	// transaction commits.
	s.writeMu.Lock()
	app, err := s.blobs.appendActive()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := app.add(blobOf(100+i, 0, bigBlob)); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.sync(); err != nil {
		t.Fatal(err)
	}
	// And a crash left a new segment no pointer refers to.
	orphan, err := s.blobs.create(true)
	if err != nil {
		t.Fatal(err)
	}
	s.writeMu.Unlock()
	orphanName := filepath.Base(orphan.name)
	s.Close()

	s = openTest(t, dir)
	checkDocs(t, s, want)
	if files := segmentFiles(t, dir); len(files) != 1 || files[0] != "000001.blob" {
		t.Errorf("segment files after reopening %v; want the unreferenced %s removed", files, orphanName)
	}
	st := s.BlobStats()
	if st.Live != 8*bigBlob || st.Bytes != segmentHeader+18*bigBlob {
		t.Errorf("BlobStats %+v: want 8 live blobs and 10 garbage ones", st)
	}
	// New writes go on after the garbage, and a new segment never takes
	// the removed one's number.
	putDocs(t, s, 1, 0)
	want[0] = 1
	checkDocs(t, s, want)
	if files := segmentFiles(t, dir); len(files) != 1 {
		t.Errorf("segment files %v, want the write in 000001.blob", files)
	}
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	if st := s.BlobStats(); st.Live != 8*bigBlob || st.Bytes != segmentHeader+8*bigBlob {
		t.Errorf("after GC BlobStats %+v: want the 11 garbage blobs reclaimed", st)
	}
	checkDocs(t, s, want)
	if files := segmentFiles(t, dir); len(files) != 1 || files[0] == orphanName || files[0] == "000001.blob" {
		t.Errorf("segment files after GC %v, want one new segment", files)
	}
}

// A flipped byte, a truncated segment and a missing one are ErrCorruption
// naming the segment and offset, from Blob, ReadBlob and ScanBlobs; the
// collection still opens and every other blob reads.
func TestBlobCorruption(t *testing.T) {
	smallSegments(t, 100<<10) // 3 blobs a segment
	dir := t.TempDir()
	s := openTest(t, dir)
	for i := range 9 {
		putDocs(t, s, 0, i)
	}
	s.Close()
	// d1 is at offset 16+40960 of segment 1; segment 2 loses its end
	// (d5); segment 3 (d6-d8) is removed.
	seg1 := filepath.Join(dir, "blobs", "000001.blob")
	f, err := os.OpenFile(seg1, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xee}, segmentHeader+bigBlob+100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(filepath.Join(dir, "blobs", "000002.blob"), segmentHeader+2*bigBlob+10); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "blobs", "000003.blob")); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	for i, want := range map[int]string{
		1: fmt.Sprintf("blobs/000001.blob: checksum %%08x of %d bytes at offset %d", bigBlob, segmentHeader+bigBlob),
		5: fmt.Sprintf("blobs/000002.blob: 10 of %d bytes at offset %d (short file)", bigBlob, segmentHeader+2*bigBlob),
		7: fmt.Sprintf("blobs/000003.blob is missing (blob of %d bytes at offset %d)", bigBlob, segmentHeader+bigBlob),
	} {
		num, _, _ := s.Lookup(fmt.Sprint("d", i))
		_, _, err := s.Blob(num, "tok/m")
		buf := []byte("kept")
		out, _, rerr := s.ReadBlob(num, "tok/m", buf)
		for _, err := range []error{err, rerr} {
			if !errors.Is(err, ErrCorruption) {
				t.Errorf("d%d: %v, want ErrCorruption", i, err)
				continue
			}
			pre, post, _ := strings.Cut(want, "%08x")
			if !strings.Contains(err.Error(), pre) || !strings.Contains(err.Error(), post) {
				t.Errorf("d%d: %v, want it to say %q", i, err, want)
			}
		}
		if string(out) != "kept" {
			t.Errorf("d%d: a failed ReadBlob returned %q, want the buffer as it was", i, out)
		}
	}
	// The rest reads.
	for _, i := range []int{0, 2, 3, 4} {
		num, _, _ := s.Lookup(fmt.Sprint("d", i))
		b, ok, err := s.Blob(num, "tok/m")
		if v, whole := checkBlob(b, i, bigBlob); err != nil || !ok || !whole || v != 0 {
			t.Errorf("d%d: %v %v", i, ok, err)
		}
	}
	if err := s.ScanBlobs(context.Background(), "tok/m", func(uint64, []byte) error { return nil }); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "blobs/000001.blob") {
		t.Errorf("ScanBlobs over a damaged segment: %v", err)
	}
	// Compaction does not lose the damaged blob's pointer, and stops at it.
	var b Batch
	b.Delete("d0")
	b.Delete("d2")
	if _, err := s.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if err := s.GC(); !errors.Is(err, ErrCorruption) {
		t.Errorf("GC of a segment with a damaged blob: %v", err)
	}
	num, _, _ := s.Lookup("d1")
	if _, _, err := s.Blob(num, "tok/m"); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "blobs/000001.blob") {
		t.Errorf("after GC, the damaged blob: %v", err)
	}
}

// Reads through the store's file system (internal/vfs) see a flipped
// byte as ErrCorruption too.
func TestBlobFlippedRead(t *testing.T) {
	dir := t.TempDir()
	ffs := &vfs.Faulty{}
	s, err := Open(dir, &Options{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	putDocs(t, s, 0, 0, 1)
	ffs.Inject(vfs.Rule{Op: vfs.OpRead, Match: "000001.blob", At: segmentHeader + bigBlob + 5, Flip: true})
	n0, _, _ := s.Lookup("d0")
	n1, _, _ := s.Lookup("d1")
	if b, _, err := s.ReadBlob(n0, "tok/m", nil); err != nil || !bytes.Equal(b, blobOf(0, 0, bigBlob)) {
		t.Errorf("d0: %v", err)
	}
	if _, _, err := s.ReadBlob(n1, "tok/m", nil); !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "blobs/000001.blob: checksum") {
		t.Errorf("d1 with a flipped byte: %v", err)
	}
	if ffs.Hits() == 0 {
		t.Error("the fault was not injected")
	}
}

// A backup carries blob bytes, not pointers: restored into an empty
// directory, the store holds the same blobs, in segments of its own.
func TestBlobBackupRestore(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	want := map[int]int{}
	for i := range 12 {
		putDocs(t, s, 0, i)
		want[i] = 0
	}
	putDocs(t, s, 2, 4, 5)
	want[4], want[5] = 2, 2
	var b Batch
	b.Delete("d7")
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	want[7] = -1
	var buf bytes.Buffer
	if err := s.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	if bytes.Count(buf.Bytes(), blobOf(4, 2, bigBlob)) != 1 {
		t.Error("the backup does not hold d4's blob whole")
	}
	dir := t.TempDir()
	if err := Restore(dir, &buf, nil); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, dir)
	checkDocs(t, r, want)
	if st := r.BlobStats(); st.Live != 11*bigBlob || st.Bytes != segmentHeader+11*bigBlob {
		t.Errorf("restored BlobStats %+v, want 11 blobs in segments, no garbage", st)
	}
}

// setInline stores blobs whole in Badger, as stores did before segments.
func setInline(t *testing.T, s *Store, id string, blobs map[string][]byte) {
	t.Helper()
	var b Batch
	b.Put(doc(id, "old"), nil)
	if _, err := s.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	num, _, _ := s.Lookup(id)
	if err := s.db.Update(func(txn *badger.Txn) error {
		for name, v := range blobs {
			if err := txn.Set(blobKey(num, name), v); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A collection written before segments existed holds its large blobs in
// Badger: they read as they are, next to new ones in segments, through
// GC, a backup (Badger's own, as older stores wrote, too) and a restore,
// which moves them into segments.
func TestInlineBlobsOfOlderStores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, dir)
	want := map[int]int{}
	for i := range 4 {
		setInline(t, s, fmt.Sprint("d", i), map[string][]byte{"tok/m": blobOf(i, 0, bigBlob), "vec/m": blobOf(i, 0, smallBlob)})
		want[i] = 0
	}
	if st := s.BlobStats(); st.Segments != 0 {
		t.Fatalf("inline blobs made segments: %+v", st)
	}
	putDocs(t, s, 1, 2, 5)
	want[2], want[5] = 1, 1
	checkDocs(t, s, want)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, dir)
	checkDocs(t, s, want)

	var ours, badgers bytes.Buffer
	if err := s.Backup(ctx, &ours); err != nil {
		t.Fatal(err)
	}
	// Badger's own backup holds pointers as they are.
	if _, err := s.db.Backup(&badgers, 0); err != nil {
		t.Fatal(err)
	}
	for name, backup := range map[string]*bytes.Buffer{"ours": &ours, "badger's": &badgers} {
		dir := t.TempDir()
		err := Restore(dir, backup, nil)
		if name == "badger's" {
			// It holds the pointers of the blobs in segments: refused.
			if !errors.Is(err, ErrCorruption) || !strings.Contains(err.Error(), "blob pointer") {
				t.Errorf("restore of a backup holding pointers: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		r := openTest(t, dir)
		checkDocs(t, r, want)
		if st := r.BlobStats(); st.Live != 5*bigBlob {
			t.Errorf("restored BlobStats %+v, want all 5 large blobs in segments", st)
		}
	}
}

// Badger's own backup of an older store (every blob inline) restores,
// with the large blobs moved into segments.
func TestRestoreBadgerBackup(t *testing.T) {
	s := openTest(t, t.TempDir())
	want := map[int]int{}
	for i := range 5 {
		setInline(t, s, fmt.Sprint("d", i), map[string][]byte{"tok/m": blobOf(i, 3, bigBlob), "vec/m": blobOf(i, 3, smallBlob)})
		want[i] = 3
	}
	setInline(t, s, "d1", map[string][]byte{"tok/m": blobOf(1, 4, bigBlob), "vec/m": blobOf(1, 4, smallBlob)})
	want[1] = 4
	var buf bytes.Buffer
	if _, err := s.db.Backup(&buf, 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Restore(dir, &buf, nil); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, dir)
	checkDocs(t, r, want)
	if st := r.BlobStats(); st.Live != 5*bigBlob {
		t.Errorf("restored BlobStats %+v, want 5 large blobs in segments", st)
	}
}

// Reads of every kind (ReadBlob from two goroutines, ScanBlobs, Backup),
// while a writer replaces blobs and GC compacts the segments under them:
// no read fails, every blob read is a whole version of its document, and
// the last versions are the ones written. Run with -race.
func TestReadBlobDuringCompaction(t *testing.T) {
	smallSegments(t, 200<<10) // 5 blobs a segment
	const docs = 20
	dir := t.TempDir()
	s := openTest(t, dir)
	ids := make([]int, docs)
	for i := range ids {
		ids[i] = i
	}
	putDocs(t, s, 0, ids...)
	nums := make([]uint64, docs)
	for i := range nums {
		nums[i], _, _ = s.Lookup(fmt.Sprint("d", i))
	}
	var stop atomic.Bool
	var reads, compactions atomic.Int64
	var wg sync.WaitGroup
	fail := make(chan error, 16)
	report := func(err error) {
		select {
		case fail <- err:
		default:
		}
		stop.Store(true)
	}
	for g := range 2 {
		wg.Go(func() {
			var buf []byte
			for k := g; !stop.Load(); k++ {
				i := k % docs
				var ok bool
				var err error
				buf, ok, err = s.ReadBlob(nums[i], "tok/m", buf[:0])
				if err != nil || !ok {
					report(fmt.Errorf("ReadBlob(d%d): %v %v", i, ok, err))
					return
				}
				if _, whole := checkBlob(buf, i, bigBlob); !whole {
					report(fmt.Errorf("ReadBlob(d%d) returned wrong bytes", i))
					return
				}
				reads.Add(1)
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			err := s.ScanBlobs(context.Background(), "tok/m", func(num uint64, b []byte) error {
				if _, whole := checkBlob(b, int(binary.LittleEndian.Uint64(b)), bigBlob); !whole {
					return fmt.Errorf("ScanBlobs: document %d: wrong bytes", num)
				}
				return nil
			})
			if err != nil {
				report(err)
				return
			}
		}
	})
	var backups atomic.Int64
	wg.Go(func() {
		for !stop.Load() {
			var buf bytes.Buffer
			if err := s.Backup(context.Background(), &buf); err != nil {
				report(fmt.Errorf("Backup: %w", err))
				return
			}
			if buf.Len() < docs*bigBlob {
				report(fmt.Errorf("a backup of %d bytes, less than the blobs", buf.Len()))
				return
			}
			backups.Add(1)
		}
	})
	wg.Go(func() {
		for !stop.Load() {
			if err := s.GC(); err != nil {
				report(err)
				return
			}
			compactions.Add(1)
		}
	})
	want := map[int]int{}
	for i := range docs {
		want[i] = 0
	}
	for v := 1; v <= 60; v++ {
		batch := []int{(v * 7) % docs, (v*7 + 3) % docs, (v*7 + 5) % docs}
		putDocs(t, s, v, batch...)
		for _, i := range batch {
			want[i] = v
		}
	}
	stop.Store(true)
	wg.Wait()
	close(fail)
	for err := range fail {
		t.Error(err)
	}
	if reads.Load() == 0 || compactions.Load() == 0 {
		t.Errorf("%d reads, %d GC passes", reads.Load(), compactions.Load())
	}
	t.Logf("%d reads, %d backups, %d GC passes, %d segments compacted", reads.Load(), backups.Load(), compactions.Load(), s.blobs.stats().Compacted)
	if err := s.GC(); err != nil {
		t.Fatal(err)
	}
	checkDocs(t, s, want)
	st := s.BlobStats()
	if st.Live != docs*bigBlob {
		t.Errorf("BlobStats %+v, want %d live bytes", st, docs*bigBlob)
	}
	s.Close()
	s = openTest(t, dir)
	if got := s.BlobStats(); got.Live != st.Live {
		t.Errorf("after reopen BlobStats %+v, want %+v", got, st)
	}
	if files, st := segmentFiles(t, dir), s.BlobStats(); len(files) != st.Segments {
		t.Errorf("segment files %v, BlobStats %+v", files, st)
	}
}

// A write whose blobs do not fit in the disk reserve, or whose segment
// write or sync fails, stores nothing and leaves no segment bytes;
// writes go on once the fault is gone.
func TestBlobWriteFaults(t *testing.T) {
	dir := t.TempDir()
	ffs := &vfs.Faulty{}
	s, err := Open(dir, &Options{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	putDocs(t, s, 0, 0)
	want := s.BlobStats()
	attempt := func(what string) {
		t.Helper()
		var b Batch
		b.Put(doc("d1", "refused"), map[string][]byte{"tok/m": blobOf(1, 0, bigBlob)})
		_, err := s.Write(context.Background(), &b)
		if err == nil {
			t.Fatalf("%s: the write succeeded", what)
		}
		if what == "disk full" && (!errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC)) {
			t.Errorf("%s: %v, want ErrDiskFull", what, err)
		}
		if _, ok, _ := s.Lookup("d1"); ok || s.Count() != 1 {
			t.Errorf("%s: the refused document is stored", what)
		}
		if got := s.BlobStats(); got != want {
			t.Errorf("%s: BlobStats %+v, want %+v", what, got, want)
		}
	}
	ffs.Inject(vfs.Rule{Op: vfs.OpWrite, Match: ".blob", At: segmentHeader + bigBlob + 100})
	attempt("segment write")
	ffs.Clear()
	ffs.Inject(vfs.Rule{Op: vfs.OpSync, Match: ".blob"})
	attempt("segment sync")
	ffs.Clear()
	s.Close()

	s, err = Open(dir, &Options{DiskReserve: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	attempt("disk full")
	s.Close()
	s = openTest(t, dir)
	if st := s.BlobStats(); st.Bytes != want.Bytes {
		t.Errorf("after the faults, segments hold %d bytes, want %d", st.Bytes, want.Bytes)
	}
	putDocs(t, s, 0, 1)
	checkDocs(t, s, map[int]int{0: 0, 1: 0})
}

// A batch too large for one transaction truncates its blobs away again.
func TestBlobBatchTooLarge(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	putDocs(t, s, 0, 0)
	want := s.BlobStats()
	var b Batch
	for i := range 3000 {
		b.Put(doc(fmt.Sprint("e", i), "x"), map[string][]byte{"tok/m": blobOf(i, 0, 4<<10)})
	}
	if _, err := s.Write(context.Background(), &b); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("a batch of 3000 documents with 1 MiB memtables: %v", err)
	}
	if got := s.BlobStats(); got != want {
		t.Errorf("BlobStats %+v after a batch too large, want %+v", got, want)
	}
	if fi, err := os.Stat(filepath.Join(dir, "blobs", "000001.blob")); err != nil || fi.Size() != want.Bytes {
		t.Errorf("segment file %v, %v; want %d bytes", fi, err, want.Bytes)
	}
	checkDocs(t, s, map[int]int{0: 0})
}

// The pointer record round-trips, and anything else is ErrCorruption.
func TestBlobPointer(t *testing.T) {
	p := blobPtr{seg: 7, off: 1 << 33, n: 250_000, crc: crc32.Checksum([]byte("x"), castagnoli)}
	got, err := decodePtr(p.encode())
	if err != nil || got != p || len(p.encode()) != pointerSize {
		t.Errorf("decode(encode(%+v)) = %+v, %v", p, got, err)
	}
	for _, bad := range [][]byte{nil, p.encode()[:20], append([]byte{2}, p.encode()[1:]...), blobPtr{seg: 1, off: 3}.encode()} {
		if _, err := decodePtr(bad); !errors.Is(err, ErrCorruption) {
			t.Errorf("decode(%x) = %v, want ErrCorruption", bad, err)
		}
	}
}

// A batch that replaces one document several times, with other blob
// names each time, leaves exactly the last version's blobs, and the
// segment space of every earlier version, committed or written by the
// batch itself, counts as garbage.
func TestUpsertTwiceInOneBatch(t *testing.T) {
	s := openTest(t, t.TempDir())
	putDocs(t, s, 0, 1, 2)
	var b Batch
	b.Put(doc("d1", "text"), map[string][]byte{"tok/m": blobOf(1, 1, bigBlob), "extra": blobOf(1, 1, smallBlob)})
	b.Put(doc("d1", "text"), map[string][]byte{"tok/m": blobOf(1, 2, bigBlob), "vec/m": blobOf(1, 2, smallBlob)})
	b.Put(doc("d2", "text"), map[string][]byte{"tok/m": blobOf(2, 2, bigBlob), "vec/m": blobOf(2, 2, smallBlob)})
	if _, err := s.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	checkDocs(t, s, map[int]int{1: 2, 2: 2})
	num, _, _ := s.Lookup("d1")
	if _, ok, err := s.Blob(num, "extra"); ok || err != nil {
		t.Errorf("the blob of d1's replaced version is still there (%v)", err)
	}
	// Five big blobs written, two live.
	if st := s.BlobStats(); st.Live != 2*bigBlob || st.Bytes != segmentHeader+5*bigBlob {
		t.Errorf("BlobStats = %+v, want 2 live blobs of %d bytes among 5", st, bigBlob)
	}
}
