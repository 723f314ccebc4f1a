//go:build cgo

package faiss

/*
#include <stdlib.h>
#include <stdint.h>
*/
import "C"

import "unsafe"

// Locations keeps the location of each vector of a located IVF index by
// id, in pages of C memory (8 bytes an id, a page allocated at its first
// vector), so that SearchLocated looks a filter's ids up inside its one
// native call, prefetching as it goes. A slot holds the location plus one,
// 0 when the id has no vector. Ids are meant to be dense, as document
// numbers are: the pages cover every id up to the largest set. Locations
// is not safe for concurrent use; its owner guards it as it guards the
// index. Close frees the pages.
type Locations struct {
	pages []*C.uint64_t // pointers to C memory only, so cgo lets C read the slice
	n     int           // ids with a location
}

const (
	locPageBits = 16
	locPageLen  = 1 << locPageBits
)

func (l *Locations) slots(p uint64) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(l.pages[p])), locPageLen)
}

// Get returns id's location, and whether it has one.
func (l *Locations) Get(id uint64) (uint64, bool) {
	p := id >> locPageBits
	if p >= uint64(len(l.pages)) || l.pages[p] == nil {
		return 0, false
	}
	v := l.slots(p)[id&(locPageLen-1)]
	return v - 1, v != 0
}

// Set records id's location.
func (l *Locations) Set(id, lo uint64) {
	p := id >> locPageBits
	for p >= uint64(len(l.pages)) {
		l.pages = append(l.pages, nil)
	}
	if l.pages[p] == nil {
		// cgo's C.malloc never returns nil: it aborts when out of memory,
		// as the Go heap does.
		l.pages[p] = (*C.uint64_t)(C.malloc(C.size_t(locPageLen * 8)))
		clear(l.slots(p))
	}
	slot := &l.slots(p)[id&(locPageLen-1)]
	if *slot == 0 {
		l.n++
	}
	*slot = lo + 1
}

// Clear forgets id's location.
func (l *Locations) Clear(id uint64) {
	p := id >> locPageBits
	if p >= uint64(len(l.pages)) || l.pages[p] == nil {
		return
	}
	slot := &l.slots(p)[id&(locPageLen-1)]
	if *slot != 0 {
		l.n--
	}
	*slot = 0
}

// Len returns the number of ids with a location.
func (l *Locations) Len() int { return l.n }

// MemoryBytes returns the C memory the pages take.
func (l *Locations) MemoryBytes() uint64 {
	var n uint64
	for _, p := range l.pages {
		if p != nil {
			n += locPageLen * 8
		}
	}
	return n
}

// Close frees the pages. The Locations is empty afterwards, and may be
// used again.
func (l *Locations) Close() {
	for _, p := range l.pages {
		if p != nil {
			C.free(unsafe.Pointer(p))
		}
	}
	l.pages, l.n = nil, 0
}
