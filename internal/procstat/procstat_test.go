package procstat

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	text := "Name:\ttandem\nVmPeak:\t  999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nRssAnon:\t     768 kB\nRssFile:\t     256 kB\nThreads:\t8\nVmSwap:\tbad kB\n"
	got := parseStatus([]byte(text))
	want := Memory{RSS: 1024 << 10, Peak: 2048 << 10, Anon: 768 << 10, File: 256 << 10}
	if got != want {
		t.Fatalf("parseStatus = %+v, want %+v", got, want)
	}
	if got := parseStatus([]byte("VmRSS: 12 MB\nVmHWM:\nRssAnon: x kB\n")); got != (Memory{}) {
		t.Fatalf("malformed lines gave %+v, want zeros", got)
	}
}

func TestReadMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the figures come from /proc/self/status, which only Linux has")
	}
	// Touch 64 MiB so that the resident set is surely above it.
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = byte(i)
	}
	m := ReadMemory()
	if m.RSS < 64<<20 || m.Anon < 64<<20 || m.Peak < m.RSS {
		t.Fatalf("ReadMemory = %+v with 64 MiB touched: want RSS and Anon ≥ 64 MiB, Peak ≥ RSS", m)
	}
	runtime.KeepAlive(b)
}

func TestOpenFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts /proc/self/fd")
	}
	before := OpenFiles()
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if after := OpenFiles(); after != before+1 {
		t.Fatalf("OpenFiles: %d before opening a file, %d after", before, after)
	}
}

func TestDirBytes(t *testing.T) {
	dir := t.TempDir()
	if got := DirBytes(dir); got != 0 {
		t.Fatalf("empty directory: %d bytes", got)
	}
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "full"), make([]byte, 100_000), 0o644); err != nil {
		t.Fatal(err)
	}
	full := DirBytes(dir)
	if full < 100_000 {
		t.Fatalf("a 100,000-byte file counts %d bytes", full)
	}
	// A sparse file of 1 GiB holds nothing; where the system reports
	// blocks it adds almost nothing.
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got := DirBytes(dir)
	if runtime.GOOS == "linux" && got-full > 1<<20 {
		t.Fatalf("a sparse 1 GiB file counts %d bytes", got-full)
	}
	if got < full {
		t.Fatalf("adding a file lowered the count: %d then %d", full, got)
	}
	if got := DirBytes(filepath.Join(dir, "missing")); got != 0 {
		t.Fatalf("missing directory: %d bytes", got)
	}
}

// TestSampler checks that a sampler keeps a peak after the memory is
// released, apart for anonymous memory and mapped files, and that Reset
// starts new peaks below it.
func TestSampler(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("anonymous and mapped memory come from /proc/self/status, which only Linux has")
	}
	s := StartSampler(10 * time.Millisecond)
	defer s.Stop()
	s.Reset()
	base := s.Peaks()
	if base.RSS == 0 || base.Anon == 0 || base.Samples < 2 {
		t.Fatalf("peaks at the start: %+v", base)
	}
	// 128 MiB of Go heap, touched, then freed: the peak keeps them.
	b := make([]byte, 128<<20)
	for i := range b {
		b[i] = byte(i)
	}
	// Map a file of 32 MiB and read it, which makes it resident.
	f, err := os.CreateTemp(t.TempDir(), "mapped")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 32<<20)); err != nil {
		t.Fatal(err)
	}
	unmap := mapAndRead(t, f, 32<<20)
	got := s.Peaks()
	unmap()
	runtime.KeepAlive(b)
	b = nil
	debug.FreeOSMemory()
	after := s.Peaks()
	// The heap's 128 MiB are live at every reading from the allocation to
	// got, so the heap at the anonymous peak holds them then.
	if got.GoHeap < 128<<20 || after.Anon < base.Anon+128<<20 || after.RSS < after.Anon {
		t.Errorf("with 128 MiB of heap touched: %+v, then %+v (start %+v)", got, after, base)
	}
	if got.File < base.File+32<<20 || after.File < got.File {
		t.Errorf("with 32 MiB of a file mapped and read: %+v, then %+v (start %+v)", got, after, base)
	}
	s.Reset()
	if now := s.Peaks(); now.Anon > after.Anon-64<<20 || now.RSS > after.RSS-64<<20 {
		t.Errorf("after the memory was freed and Reset, peaks %+v, before %+v", now, after)
	}
	s.Stop()
	s.Stop()
}
