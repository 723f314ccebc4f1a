package manual

import (
	"runtime"
	"testing"
)

// TestNewIsOutsideTheGoHeap allocates 64 MiB, writes every byte, and
// checks that it was zeroed, that the Go heap did not grow by it, and that
// Free gives it back without fault.
func TestNewIsOutsideTheGoHeap(t *testing.T) {
	const n = 64 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b := New(n)
	if len(b) != n || cap(b) != n {
		t.Fatalf("New(%d): len %d cap %d", n, len(b), cap(b))
	}
	for i := 0; i < n; i += 4093 {
		if b[i] != 0 {
			t.Fatalf("byte %d is %d, want 0", i, b[i])
		}
	}
	for i := range b {
		b[i] = byte(i)
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); outsideHeap && grew > n/2 {
		t.Errorf("the Go heap grew by %d bytes for %d bytes of New", grew, n)
	}
	if last := n - 1; b[last] != byte(last) {
		t.Errorf("last byte %d", b[n-1])
	}
	Free(b)
	if New(0) != nil {
		t.Error("New(0) is not nil")
	}
	Free(nil)
}
