//go:build cgo

package faiss

/*
#include <faiss/c_api/tandem_ex_c.h>
#include <faiss/c_api/IndexIVF_c.h>
#include <faiss/c_api/error_c.h>
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
)

// directMapHashtable is FAISS's DirectMap::Hashtable.
const directMapHashtable = 2

// ivfLocked returns x's native index as an IVF index, or nil.
func (x *Index) ivfLocked() *C.FaissIndexIVF {
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return nil
	}
	return C.faiss_IndexIVF_cast(ci)
}

// SetDirectMap gives an IVF index a hashtable from id to its place in the
// lists (about 40 bytes a vector), which SearchIDs needs and which makes
// Remove a lookup instead of a scan of every list. It is kept by Marshal.
func (x *Index) SetDirectMap() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	ivf := x.ivfLocked()
	if ivf == nil {
		return fmt.Errorf("faiss: direct map: %s is not an IVF index", x.desc)
	}
	if c := C.faiss_IndexIVF_set_direct_map(ivf, directMapHashtable); c != 0 {
		return fmt.Errorf("faiss: direct map: %s", C.GoString(C.faiss_get_last_error()))
	}
	return nil
}

// HasDirectMap reports whether x is an IVF index with a hashtable direct
// map (SetDirectMap).
func (x *Index) HasDirectMap() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return false
	}
	ivf := x.ivfLocked()
	return ivf != nil && C.faiss_IndexIVF_direct_map_type(ivf) == directMapHashtable
}

// SearchIDs returns the k best of the vectors with the given ids for one
// query, scored from their codes as an IVF search scores them (ids not in
// the index are skipped). Its cost is in len(ids), whatever the index's
// size: a filter allowing few documents is searched exactly over their
// codes instead of over every list. It needs SetDirectMap.
func (x *Index) SearchIDs(ctx context.Context, query []float32, ids []int64, k int) (Result, error) {
	if err := x.checkVectors(query); err != nil {
		return Result{}, fmt.Errorf("faiss: search ids: %w", err)
	}
	if len(query) != x.d {
		return Result{}, fmt.Errorf("faiss: search ids: one query of %d values, got %d", x.d, len(query))
	}
	if k <= 0 {
		return Result{}, fmt.Errorf("faiss: search ids: k must be positive, got %d", k)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if len(ids) == 0 {
		return Result{}, nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return Result{}, ErrClosed
	}
	ivf := x.ivfLocked()
	if ivf == nil {
		return Result{}, errors.New("faiss: search ids: not an IVF index")
	}
	dist := make([]float32, k)
	labels := make([]int64, k)
	c := C.faiss_IndexIVF_search_ids(ivf, (*C.float)(&query[0]), C.idx_t(len(ids)), (*C.idx_t)(&ids[0]),
		C.idx_t(k), (*C.float)(&dist[0]), (*C.idx_t)(&labels[0]))
	runtime.KeepAlive(query)
	runtime.KeepAlive(ids)
	if c != 0 {
		return Result{}, fmt.Errorf("faiss: search ids: %s", C.GoString(C.faiss_get_last_error()))
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

// removeLocked removes ids through Tandem's C entry point, which takes
// the direct map's lookup when there is one.
func (x *Index) removeLocked(ids []int64) (int, error) {
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return 0, errors.New("not a FAISS index this package can reach")
	}
	var n C.size_t
	c := C.faiss_Index_remove_ids_tandem(ci, C.idx_t(len(ids)), (*C.idx_t)(&ids[0]), &n)
	runtime.KeepAlive(ids)
	if c != 0 {
		return 0, errors.New(C.GoString(C.faiss_get_last_error()))
	}
	return int(n), nil
}
