//go:build cgo

package manual

/*
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"

	_ "github.com/tandemsearch/tandem/internal/malloc" // the arena cap and mmap threshold
)

// outsideHeap says New allocates outside the Go heap.
const outsideHeap = true

// New returns n zeroed bytes from the C heap (nil for n 0).
func New(n int) []byte {
	if n == 0 {
		return nil
	}
	p := C.calloc(C.size_t(n), 1)
	if p == nil {
		panic("manual: out of memory")
	}
	return unsafe.Slice((*byte)(p), n)
}

// Free gives back memory New returned.
func Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	C.free(unsafe.Pointer(unsafe.SliceData(b[:1])))
}
