//go:build cgo

package faiss

/*
#cgo LDFLAGS: -lfaiss_c
#include <faiss/c_api/tandem_ex_c.h>
#include <faiss/c_api/error_c.h>
*/
import "C"

import (
	"fmt"
	"reflect"
	"sort"
	"sync"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	gofaiss "github.com/blevesearch/go-faiss"
	"github.com/tandemsearch/tandem/internal/blas"
)

// A flat index searched for one query by inner product is scanned here,
// with OpenBLAS's product over FAISS's own rows, rather than by FAISS:
// the FAISS 1.7.3 that Debian builds computes inner products with its
// scalar reference loop (fvec_inner_product_ref), at half the speed of
// the AVX2 kernels OpenBLAS picks at run time. The ranking is the same
// up to the rounding of each product's sum; equal scores rank by
// smaller id.

// cIndex returns the FaissIndex* behind idx: go-faiss keeps it, unexported,
// as the first field of the struct its Index interface holds. It returns
// nil if that layout changes, and the caller then lets FAISS search.
func cIndex(idx *gofaiss.IndexImpl) *C.FaissIndex {
	v := reflect.ValueOf(idx.Index)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct || v.Elem().NumField() == 0 {
		return nil
	}
	f := v.Elem().Field(0)
	if f.Kind() != reflect.Pointer || f.Type().Elem().Name() != "_Ctype_struct_FaissIndex_H" {
		return nil
	}
	return (*C.FaissIndex)(f.UnsafePointer())
}

var scoreBufs = sync.Pool{New: func() any { return new([]float32) }}

// searchFlatLocked returns the k best rows of a flat inner-product index
// for one query, restricted to the ids whose id >> shift is in allow when
// allow is not nil; ok is false, and nothing done, for any other index.
// x.mu must be held.
func (x *Index) searchFlatLocked(query []float32, k int, allow *roaring64.Bitmap, shift uint) (res Result, ok bool, err error) {
	if x.mu.closed {
		return Result{}, false, ErrClosed
	}
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return Result{}, false, nil
	}
	var (
		xb  *C.float
		ids *C.idx_t
		n   C.idx_t
	)
	if c := C.faiss_IndexFlat_data(ci, &xb, &ids, &n); c != 0 {
		return Result{}, false, fmt.Errorf("faiss: flat data: %s", C.GoString(C.faiss_get_last_error()))
	}
	if xb == nil {
		return Result{}, false, nil
	}
	if n == 0 {
		return Result{}, true, nil
	}
	var bits []byte
	if allow != nil {
		if bits, err = allowBits(allow); err != nil {
			return Result{}, true, err
		}
	}
	rows := unsafe.Slice((*float32)(unsafe.Pointer(xb)), int(n)*x.d)
	var idOf []int64
	if ids != nil {
		idOf = unsafe.Slice((*int64)(unsafe.Pointer(ids)), int(n))
	}
	buf := scoreBufs.Get().(*[]float32)
	defer scoreBufs.Put(buf)
	if cap(*buf) < int(n) {
		*buf = make([]float32, n)
	}
	scores := (*buf)[:n]
	if err := blas.MulV(rows, int(n), x.d, query, scores); err != nil {
		return Result{}, true, fmt.Errorf("faiss: flat scan: %w", err)
	}
	h := topK{k: k}
	for i, s := range scores {
		id := int64(i)
		if idOf != nil {
			id = idOf[i]
		}
		if bits != nil && (id < 0 || !bitSet(bits, uint64(id)>>shift)) {
			continue
		}
		h.push(id, s)
	}
	return h.sorted(), true, nil
}

// bitSet reports whether bit i of an allowBits bitmap is set.
func bitSet(bits []byte, i uint64) bool {
	return i>>3 < uint64(len(bits)) && bits[i>>3]&(1<<(i&7)) != 0
}

// topK keeps the k best (score, id) pairs: higher score first, then
// smaller id. It is a min-heap on that order, its root the worst kept.
type topK struct {
	k      int
	ids    []int64
	scores []float32
}

// worse reports whether pair i ranks below pair j.
func (h *topK) worse(i, j int) bool {
	if h.scores[i] != h.scores[j] {
		return h.scores[i] < h.scores[j]
	}
	return h.ids[i] > h.ids[j]
}

func (h *topK) push(id int64, s float32) {
	if len(h.ids) < h.k {
		h.ids = append(h.ids, id)
		h.scores = append(h.scores, s)
		for i := len(h.ids) - 1; i > 0; {
			p := (i - 1) / 2
			if !h.worse(i, p) {
				break
			}
			h.swap(i, p)
			i = p
		}
		return
	}
	if s < h.scores[0] || (s == h.scores[0] && id > h.ids[0]) {
		return
	}
	h.ids[0], h.scores[0] = id, s
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h.ids) {
			break
		}
		if c+1 < len(h.ids) && h.worse(c+1, c) {
			c++
		}
		if !h.worse(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
}

func (h *topK) swap(i, j int) {
	h.ids[i], h.ids[j] = h.ids[j], h.ids[i]
	h.scores[i], h.scores[j] = h.scores[j], h.scores[i]
}

// sorted returns the kept pairs, best first.
func (h *topK) sorted() Result {
	sort.Sort(byRank{h})
	return Result{IDs: h.ids, Scores: h.scores}
}

type byRank struct{ h *topK }

func (b byRank) Len() int           { return len(b.h.ids) }
func (b byRank) Less(i, j int) bool { return b.h.worse(j, i) }
func (b byRank) Swap(i, j int)      { b.h.swap(i, j) }
