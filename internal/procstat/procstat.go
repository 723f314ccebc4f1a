// Package procstat reads what the harnesses and benchmarks report about
// the process and its data: resident memory (now and at its peak), open
// files, and the disk space a directory takes; a Sampler keeps the peaks
// of anonymous and mapped-file memory, which the system keeps only for
// their sum, by reading them at an interval.
//
// Every reading is best effort: where the system does not say (no /proc,
// not Linux), a figure is 0 rather than an error, so that a report still
// prints. On Linux the memory figures come from one read of
// /proc/self/status.
package procstat

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Memory is the process's memory as /proc/self/status gives it, in bytes.
type Memory struct {
	// RSS is the resident set (VmRSS): Anon plus File plus shared memory.
	RSS int64
	// Peak is the largest resident set since the process started or the
	// last ResetPeak (VmHWM; getrusage's maximum elsewhere).
	Peak int64
	// Anon is resident anonymous memory (RssAnon): Go's heap and C's.
	Anon int64
	// File is resident file-backed memory (RssFile): memory-mapped files,
	// which the kernel may drop.
	File int64
}

// ReadMemory reads the process's memory figures; the zero Memory where
// /proc/self/status cannot be read (Peak then comes from getrusage).
func ReadMemory() Memory {
	var m Memory
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		m = parseStatus(b)
	}
	if m.Peak == 0 {
		m.Peak = maxRSS()
	}
	return m
}

// parseStatus picks the sizes (lines "Key:   123 kB") Memory holds out of
// the text of /proc/self/status.
func parseStatus(b []byte) Memory {
	var m Memory
	fields := map[string]*int64{"VmRSS": &m.RSS, "VmHWM": &m.Peak, "RssAnon": &m.Anon, "RssFile": &m.File}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		p := fields[string(key)]
		if p == nil {
			continue
		}
		num, unit, _ := bytes.Cut(bytes.TrimSpace(rest), []byte(" "))
		kb, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil || string(unit) != "kB" {
			continue
		}
		*p = kb << 10
	}
	return m
}

// ResetPeak starts a new peak at the current resident set (Linux: 5
// written to /proc/self/clear_refs); elsewhere the peak stays cumulative.
func ResetPeak() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// OpenFiles counts the process's open file descriptors; 0 where there is
// no /proc.
func OpenFiles() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(fds)
}

// DirBytes is the disk space the regular files under dir take: the blocks
// allocated to them where the system says (sparse files count what they
// hold), their sizes elsewhere. Files that vanish during the walk, or
// cannot be read, count nothing.
func DirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += allocated(info)
			}
		}
		return nil
	})
	return n
}
