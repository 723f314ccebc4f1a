package procstat

import (
	"os"
	"syscall"
	"testing"
)

// pageSum keeps mapAndRead's reads from being optimised away.
var pageSum byte

// mapAndRead maps the first n bytes of f and reads every page, and
// returns the function that unmaps them.
func mapAndRead(t *testing.T, f *os.File, n int) func() {
	t.Helper()
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 4096 {
		pageSum += m[i]
	}
	return func() { syscall.Munmap(m) }
}
