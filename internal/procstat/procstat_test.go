package procstat

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
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
