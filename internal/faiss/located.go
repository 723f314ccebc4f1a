//go:build cgo

package faiss

/*
#include <stdint.h>
#include <faiss/c_api/tandem_ex_c.h>
#include <faiss/c_api/error_c.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// A located IVF index leaves to its caller the location of each vector,
// list<<32 | offset: the caller keeps them by id (dense keeps a paged
// array by document number, 8 bytes a document, where FAISS's own direct
// map is a hashtable of about 40 bytes a vector whose lookups miss the
// cache), and passes them back to remove and to score given vectors.
// AddLocated reports each added vector's location and RemoveLocated the
// new location of each vector its removals moved; a caller that applies
// both always holds every vector's location.

// IsIVF reports whether x is an IVF index with in-memory lists, which the
// located methods need.
func (x *Index) IsIVF() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return !x.mu.closed && x.mu.idx.IsIVFIndex()
}

// AddLocated is Add for an IVF index, calling fn with each added vector's
// id and location: Assign on one goroutine, then AddLocatedAssigned.
func (x *Index) AddLocated(ids []int64, vecs []float32, fn func(id int64, lo uint64)) error {
	if len(ids) == 0 && len(vecs) == 0 {
		return nil
	}
	assign, err := x.Assign(vecs, 1)
	if err != nil {
		return fmt.Errorf("faiss: add: %w", err)
	}
	return x.AddLocatedAssigned(ids, vecs, assign, fn)
}

// Assign returns the list of each vector of vecs (row after row) in an IVF
// index, as adding them would choose it, computed by workers goroutines
// on slices of vecs at once (FAISS's own assignment is one BLAS call on
// one thread here: internal/blas). It only reads the index: an
// assignment may run while the index is searched, and its result stays
// valid until the index is trained again.
func (x *Index) Assign(vecs []float32, workers int) ([]int64, error) {
	if err := x.checkVectors(vecs); err != nil {
		return nil, fmt.Errorf("faiss: assign: %w", err)
	}
	n := len(vecs) / x.d
	out := make([]int64, n)
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return nil, ErrClosed
	}
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return nil, errors.New("faiss: assign: not a FAISS index this package can reach")
	}
	// Slices of at least 256 vectors: below that the product is too small
	// to be worth a thread.
	workers = max(1, min(workers, n/256))
	per := (n + workers - 1) / workers
	errs := make([]error, workers)
	done := make(chan struct{}, workers)
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			lo, hi := w*per, min(n, (w+1)*per)
			if lo >= hi {
				return
			}
			if c := C.faiss_IndexIVF_assign(ci, C.idx_t(hi-lo), (*C.float)(&vecs[lo*x.d]), (*C.idx_t)(&out[lo])); c != 0 {
				errs[w] = fmt.Errorf("faiss: assign %d vectors: %s", hi-lo, C.GoString(C.faiss_get_last_error()))
			}
		}()
	}
	for range workers {
		<-done
	}
	runtime.KeepAlive(vecs)
	runtime.KeepAlive(out)
	return out, errors.Join(errs...)
}

// AddLocatedAssigned is AddLocated with each vector's list given, as
// Assign computed it.
func (x *Index) AddLocatedAssigned(ids []int64, vecs []float32, assign []int64, fn func(id int64, lo uint64)) error {
	if len(ids) == 0 && len(vecs) == 0 {
		return nil
	}
	if err := x.checkAdd(ids, vecs); err != nil {
		return err
	}
	if len(assign) != len(ids) {
		return fmt.Errorf("faiss: add: %d lists for %d vectors", len(assign), len(ids))
	}
	outIDs := make([]int64, len(ids))
	outLo := make([]uint64, len(ids))
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return errors.New("faiss: add: not a FAISS index this package can reach")
	}
	c := C.faiss_IndexIVF_add_located_assigned(ci, C.idx_t(len(ids)), (*C.float)(&vecs[0]), (*C.idx_t)(&ids[0]),
		(*C.idx_t)(&assign[0]), (*C.idx_t)(&outIDs[0]), (*C.uint64_t)(&outLo[0]))
	runtime.KeepAlive(vecs)
	runtime.KeepAlive(ids)
	runtime.KeepAlive(assign)
	if c != 0 {
		return fmt.Errorf("faiss: add %d vectors: %s", len(ids), C.GoString(C.faiss_get_last_error()))
	}
	for i, id := range outIDs {
		fn(id, outLo[i])
	}
	return nil
}

// TrainThreaded is Train for an IVF index, with its coarse k-means's
// assignments spread over threads.
func (x *Index) TrainThreaded(vecs []float32, threads int) error {
	if err := x.checkVectors(vecs); err != nil {
		return fmt.Errorf("faiss: train: %w", err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return errors.New("faiss: train: not a FAISS index this package can reach")
	}
	c := C.faiss_IndexIVF_train_threaded(ci, C.idx_t(len(vecs)/x.d), (*C.float)(&vecs[0]), C.int(threads))
	runtime.KeepAlive(vecs)
	if c != 0 {
		return fmt.Errorf("faiss: train on %d vectors: %s", len(vecs)/x.d, C.GoString(C.faiss_get_last_error()))
	}
	return nil
}

// RemoveLocated removes the vectors with ids at their locations los,
// calling fn with the id and new location of each vector that moved. A
// location that does not hold its id is an error (the caller's locations
// are out of date), and the index may then have removed some of the ids.
func (x *Index) RemoveLocated(ids []int64, los []uint64, fn func(id int64, lo uint64)) error {
	if len(ids) != len(los) {
		return fmt.Errorf("faiss: remove: %d ids for %d locations", len(ids), len(los))
	}
	if len(ids) == 0 {
		return nil
	}
	movedIDs := make([]int64, len(ids))
	movedLo := make([]uint64, len(ids))
	var n C.size_t
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return errors.New("faiss: remove: not a FAISS index this package can reach")
	}
	c := C.faiss_IndexIVF_remove_located(ci, C.idx_t(len(ids)), (*C.idx_t)(&ids[0]), (*C.uint64_t)(&los[0]),
		(*C.idx_t)(&movedIDs[0]), (*C.uint64_t)(&movedLo[0]), &n)
	runtime.KeepAlive(ids)
	runtime.KeepAlive(los)
	if c != 0 {
		return fmt.Errorf("faiss: remove %d vectors: %s", len(ids), C.GoString(C.faiss_get_last_error()))
	}
	for i := range int(n) {
		fn(movedIDs[i], movedLo[i])
	}
	return nil
}

// Locate calls fn with every vector's id and location.
func (x *Index) Locate(fn func(id int64, lo uint64)) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return ErrClosed
	}
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return errors.New("faiss: locate: not a FAISS index this package can reach")
	}
	n := x.mu.idx.Ntotal()
	if n == 0 {
		return nil
	}
	ids := make([]int64, n)
	los := make([]uint64, n)
	if c := C.faiss_IndexIVF_locate_all(ci, (*C.idx_t)(&ids[0]), (*C.uint64_t)(&los[0])); c != 0 {
		return fmt.Errorf("faiss: locate: %s", C.GoString(C.faiss_get_last_error()))
	}
	for i, id := range ids {
		fn(id, los[i])
	}
	return nil
}

// SearchLocated returns the k best, for one query, of the vectors with
// ids, whose locations locs holds: ids without a location are skipped.
// The ids must be in ascending order (as a bitmap's are), so that their
// slots are read in order. The codes are scored as an IVF search scores
// them: 8-bit scalar codes by inner product to float rounding (added in
// another order), others exactly. Its cost is in len(ids), whatever the
// index's size: a filter allowing few documents is searched exactly over
// their codes instead of over every list, on OpenMP's threads when it
// allows many. With 0 < nprobe < the lists, only the ids in the nprobe
// lists nearest the query are scored: the candidates of an IVF search
// probing that many lists with ids allowed, without reading any other
// code.
func (x *Index) SearchLocated(ctx context.Context, query []float32, ids []uint64, locs *Locations, k, nprobe int) (Result, error) {
	if len(query) != x.d {
		return Result{}, fmt.Errorf("faiss: search located: one query of %d values, got %d", x.d, len(query))
	}
	if k <= 0 {
		return Result{}, fmt.Errorf("faiss: search located: k must be positive, got %d", k)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if len(ids) == 0 || len(locs.pages) == 0 {
		return Result{}, nil
	}
	dist := make([]float32, k)
	labels := make([]int64, k)
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return Result{}, ErrClosed
	}
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return Result{}, errors.New("faiss: search located: not a FAISS index this package can reach")
	}
	c := C.faiss_IndexIVF_search_located(ci, (*C.float)(&query[0]), C.idx_t(len(ids)), (*C.uint64_t)(&ids[0]),
		(**C.uint64_t)(unsafe.Pointer(&locs.pages[0])), C.size_t(len(locs.pages)), C.int(locPageBits),
		C.idx_t(max(nprobe, 0)), C.idx_t(k), (*C.float)(&dist[0]), (*C.idx_t)(&labels[0]))
	runtime.KeepAlive(query)
	runtime.KeepAlive(ids)
	runtime.KeepAlive(locs.pages)
	if c != 0 {
		return Result{}, fmt.Errorf("faiss: search located: %s", C.GoString(C.faiss_get_last_error()))
	}
	var r Result
	for i, id := range labels {
		if id >= 0 {
			r.IDs = append(r.IDs, id)
			r.Scores = append(r.Scores, dist[i])
		}
	}
	return r, nil
}

// dotU8 is the inner product of weights w with 8-bit codes c by the kernel
// SearchLocated scores 8-bit scalar codes with (AVX2 where the CPU has
// it), or by the portable one: for tests, which cannot call C.
func dotU8(w []float32, c []byte, portable bool) float32 {
	if len(w) != len(c) || len(w) == 0 {
		panic("faiss: dotU8: lengths differ or are zero")
	}
	p := C.int(0)
	if portable {
		p = 1
	}
	r := C.faiss_tandem_dot_u8((*C.float)(&w[0]), (*C.uint8_t)(&c[0]), C.size_t(len(w)), p)
	runtime.KeepAlive(w)
	runtime.KeepAlive(c)
	return float32(r)
}
