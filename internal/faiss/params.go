//go:build cgo

package faiss

/*
#include <stdlib.h>
#include <faiss/c_api/tandem_ex_c.h>
#include <faiss/c_api/IndexIVF_c.h>
#include <faiss/c_api/error_c.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
)

// searchWithParamsLocked searches through FAISS search parameters: an ID
// selector for opts.Allow (a bitmap over id >> opts.AllowShift, copied by
// the C side) and, for IVF indexes, opts.NProbe lists (the index's own
// nprobe when 0). x.mu must be held.
func (x *Index) searchWithParamsLocked(queries []float32, k int64, opts SearchOptions) (dist []float32, labels []int64, err error) {
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return nil, nil, errors.New("search parameters: not a FAISS index this package can reach")
	}
	var sel *C.FaissIDSelector
	if opts.Allow != nil {
		bits, err := allowBits(opts.Allow)
		if err != nil {
			return nil, nil, err
		}
		if c := C.faiss_IDSelectorBitmapShifted_new(&sel, C.size_t(len(bits)), (*C.uint8_t)(&bits[0]), C.int(opts.AllowShift)); c != 0 {
			return nil, nil, fmt.Errorf("bitmap selector: %s", C.GoString(C.faiss_get_last_error()))
		}
		defer C.faiss_IDSelector_free(sel)
	}
	var sp *C.FaissSearchParameters
	if ivf := C.faiss_IndexIVF_cast(ci); ivf != nil {
		nprobe := C.size_t(C.faiss_IndexIVF_nprobe(ivf))
		if opts.NProbe > 0 {
			nprobe = C.size_t(min(opts.NProbe, int(C.faiss_IndexIVF_nlist(ivf))))
		}
		if c := C.faiss_SearchParametersIVF_new_with(&sp, sel, nprobe, 0); c != 0 {
			return nil, nil, fmt.Errorf("IVF search parameters: %s", C.GoString(C.faiss_get_last_error()))
		}
	} else if c := C.faiss_SearchParameters_new(&sp, sel); c != 0 {
		return nil, nil, fmt.Errorf("search parameters: %s", C.GoString(C.faiss_get_last_error()))
	}
	defer C.faiss_SearchParameters_free(sp)
	nq := int64(len(queries) / x.d)
	dist = make([]float32, nq*k)
	labels = make([]int64, nq*k)
	c := C.faiss_Index_search_with_params(ci, C.idx_t(nq), (*C.float)(&queries[0]), C.idx_t(k), sp,
		(*C.float)(&dist[0]), (*C.idx_t)(&labels[0]))
	runtime.KeepAlive(queries)
	if c != 0 {
		return nil, nil, errors.New(C.GoString(C.faiss_get_last_error()))
	}
	return dist, labels, nil
}
