package storage

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// BenchmarkReadBlob stores documents with one token-matrix-sized blob
// each (250 KB, as SciFact's f16 matrices are on average), in blob
// segments ("segments", read with ReadBlob through pread) or whole in
// Badger's value log as stores did before segments ("badger-vlog", read
// with Blob through Badger's memory map). It reopens the store, reads
// every blob once and reports the disk the store takes and how much the
// process's resident file pages (RssFile) and resident memory (VmRSS)
// grew from before the reopen to the end of that pass; then it times
// reads, round robin.
//
// TANDEM_BLOB_BENCH_DOCS sets the number of documents (default 500):
//
//	TANDEM_BLOB_BENCH_DOCS=5000 go test -run '^$' -bench ReadBlob -benchtime 2000x ./storage/
func BenchmarkReadBlob(b *testing.B) {
	docs := 500
	if v := os.Getenv("TANDEM_BLOB_BENCH_DOCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			b.Fatalf("TANDEM_BLOB_BENCH_DOCS=%q: want a positive number", v)
		}
		docs = n
	}
	const size = 250_000
	for _, layout := range []string{"segments", "badger-vlog"} {
		b.Run(layout, func(b *testing.B) {
			dir := b.TempDir()
			s, err := Open(dir, &Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			nums := fillBench(b, s, layout, docs, size)
			s.Close()
			rss0, file0 := procRSS(b) // Badger maps its last value log at Open
			s, err = Open(dir, &Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			disk := benchDirBytes(dir)
			read := func(num uint64, buf []byte) []byte {
				var ok bool
				var err error
				if layout == "segments" {
					buf, ok, err = s.ReadBlob(num, "tok/m", buf[:0])
				} else {
					buf, ok, err = s.Blob(num, "tok/m")
				}
				if err != nil || !ok || len(buf) != size {
					b.Fatalf("document %d: %d bytes, %v %v", num, len(buf), ok, err)
				}
				return buf
			}
			var buf []byte
			for _, num := range nums {
				buf = read(num, buf)
			}
			rss1, file1 := procRSS(b)
			b.SetBytes(size)
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				buf = read(nums[k%len(nums)], buf)
				k++
			}
			b.ReportMetric(float64(disk), "disk-bytes")
			b.ReportMetric(float64(file1-file0)/(1<<20), "RssFile-growth-MiB")
			b.ReportMetric(float64(rss1-rss0)/(1<<20), "VmRSS-growth-MiB")
		})
	}
}

// fillBench writes docs documents with a blob of size bytes each, in
// batches of 100, and returns their numbers.
func fillBench(b *testing.B, s *Store, layout string, docs, size int) []uint64 {
	b.Helper()
	ctx := context.Background()
	blob := make([]byte, size)
	x := uint32(1)
	for i := range blob {
		x = x*1664525 + 1013904223
		blob[i] = byte(x >> 24)
	}
	for start := 0; start < docs; start += 100 {
		var batch Batch
		n := min(100, docs-start)
		for i := start; i < start+n; i++ {
			blob[0], blob[1], blob[2] = byte(i), byte(i>>8), byte(i>>16)
			var blobs map[string][]byte
			if layout == "segments" {
				blobs = map[string][]byte{"tok/m": blob}
			}
			batch.Put(doc(fmt.Sprint("d", i), "text"), blobs)
		}
		if _, err := s.Write(ctx, &batch); err != nil {
			b.Fatal(err)
		}
		if layout == "segments" {
			continue
		}
		// As stores wrote token matrices before segments: whole, in
		// Badger (which keeps values of 4 KiB or more in its value log).
		if err := s.db.Update(func(txn *badger.Txn) error {
			for i := start; i < start+n; i++ {
				blob[0], blob[1], blob[2] = byte(i), byte(i>>8), byte(i>>16)
				if err := txn.Set(blobKey(uint64(i), "tok/m"), append([]byte(nil), blob...)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	nums := make([]uint64, docs)
	for i := range nums {
		nums[i] = uint64(i)
	}
	return nums
}

// procRSS reads VmRSS and RssFile, in bytes, from /proc/self/status.
func procRSS(b *testing.B) (rss, file int64) {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "RssFile":
			file = kb << 10
		}
	}
	return rss, file
}

// benchDirBytes is the disk space the regular files under dir take.
func benchDirBytes(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += allocated(fi)
		}
		return nil
	})
	return n
}

// BenchmarkOpenPointers times the pass Open makes over the blob keys to
// count each segment's live bytes (livePointers), over a store holding
// TANDEM_BLOB_BENCH_POINTERS pointer records (default 100,000; a
// collection of n documents with one token matrix each holds n) and as
// many small inline blobs, which the pass skips:
//
//	TANDEM_BLOB_BENCH_POINTERS=1000000 go test -run '^$' -bench OpenPointers -benchtime 3x ./storage/
func BenchmarkOpenPointers(b *testing.B) {
	n := 100_000
	if v := os.Getenv("TANDEM_BLOB_BENCH_POINTERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("TANDEM_BLOB_BENCH_POINTERS=%q: want a positive number", v)
		}
	}
	dir := b.TempDir()
	s, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	wb := s.db.NewWriteBatch()
	vec := make([]byte, smallBlob)
	for i := range n {
		p := blobPtr{seg: uint32(1 + i/1000), off: segmentHeader + int64(i%1000)*250_000, n: 250_000}
		if err := wb.SetEntry(badger.NewEntry(blobKey(uint64(i), "tok/m"), p.encode()).WithMeta(blobPointerMeta)); err != nil {
			b.Fatal(err)
		}
		if err := wb.Set(blobKey(uint64(i), "vec/m"), vec); err != nil {
			b.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		live, err := livePointers(s.db)
		if err != nil || len(live) != (n+999)/1000 {
			b.Fatalf("%d segments, %v", len(live), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/pointer")
}
