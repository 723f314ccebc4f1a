//go:build cgo

package faiss

/*
#cgo LDFLAGS: -lfaiss_c
#include <stdlib.h>
#include <faiss/c_api/Clustering_c.h>
#include <faiss/c_api/IndexFlat_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// KMeans clusters the n = len(x)/d vectors of x into k centroids with
// FAISS's Clustering (assignment by exact L2 search over the centroids)
// and returns them, k rows of d values. It needs k ≤ n; FAISS samples at
// most 256 points per centroid.
func KMeans(x []float32, d, k int, opts KMeansOptions) ([]float32, error) {
	if d <= 0 || k <= 0 {
		return nil, fmt.Errorf("faiss: kmeans: dimension %d and k %d must be positive", d, k)
	}
	if len(x)%d != 0 {
		return nil, fmt.Errorf("faiss: kmeans: %d values is not a whole number of %d-dimensional vectors", len(x), d)
	}
	n := len(x) / d
	if n < k {
		return nil, fmt.Errorf("faiss: kmeans: %d points for %d centroids", n, k)
	}
	var p C.FaissClusteringParameters
	C.faiss_ClusteringParameters_init(&p)
	p.niter = 20
	if opts.Iterations > 0 {
		p.niter = C.int(opts.Iterations)
	}
	if opts.Spherical {
		p.spherical = 1
	}
	p.seed = C.int(opts.Seed)
	p.min_points_per_centroid = 1 // a small collection still gets k centroids
	var cl *C.FaissClustering
	if c := C.faiss_Clustering_new_with_params(&cl, C.int(d), C.int(k), &p); c != 0 {
		return nil, fmt.Errorf("faiss: kmeans: %s", lastError())
	}
	defer C.faiss_Clustering_free(cl)
	var flat *C.FaissIndexFlatL2
	if c := C.faiss_IndexFlatL2_new_with(&flat, C.idx_t(d)); c != 0 {
		return nil, fmt.Errorf("faiss: kmeans: %s", lastError())
	}
	defer C.faiss_Index_free((*C.FaissIndex)(flat))
	if c := C.faiss_Clustering_train(cl, C.idx_t(n), (*C.float)(unsafe.Pointer(&x[0])), (*C.FaissIndex)(flat)); c != 0 {
		return nil, fmt.Errorf("faiss: kmeans of %d points into %d: %s", n, k, lastError())
	}
	var (
		ptr  *C.float
		size C.size_t
	)
	C.faiss_Clustering_centroids(cl, &ptr, &size)
	if int(size) != k*d {
		return nil, fmt.Errorf("faiss: kmeans: %d centroid values, want %d", size, k*d)
	}
	out := make([]float32, k*d)
	copy(out, unsafe.Slice((*float32)(unsafe.Pointer(ptr)), k*d))
	return out, nil
}

func lastError() string {
	if s := C.faiss_get_last_error(); s != nil {
		return C.GoString(s)
	}
	return "unknown error"
}

// Quantizer assigns vectors to the nearest of a fixed set of centroids by
// inner product, with an exact flat FAISS index (BLAS for batches). Close
// frees it; it is safe for concurrent Assign calls.
type Quantizer struct {
	idx *C.FaissIndexFlatIP
	d   int
	k   int
}

// NewQuantizer holds centroids, k rows of d values.
func NewQuantizer(centroids []float32, d int) (*Quantizer, error) {
	if d <= 0 || len(centroids) == 0 || len(centroids)%d != 0 {
		return nil, fmt.Errorf("faiss: quantizer: %d centroid values of dimension %d", len(centroids), d)
	}
	var idx *C.FaissIndexFlatIP
	if c := C.faiss_IndexFlatIP_new_with(&idx, C.idx_t(d)); c != 0 {
		return nil, fmt.Errorf("faiss: quantizer: %s", lastError())
	}
	k := len(centroids) / d
	if c := C.faiss_Index_add((*C.FaissIndex)(idx), C.idx_t(k), (*C.float)(unsafe.Pointer(&centroids[0]))); c != 0 {
		C.faiss_Index_free((*C.FaissIndex)(idx))
		return nil, fmt.Errorf("faiss: quantizer: add %d centroids: %s", k, lastError())
	}
	return &Quantizer{idx: idx, d: d, k: k}, nil
}

// Assign sets out[i] to the centroid with the largest inner product with
// vector i of x; len(out) = len(x)/d.
func (q *Quantizer) Assign(x []float32, out []int32) error {
	if q.idx == nil {
		return fmt.Errorf("faiss: quantizer: closed")
	}
	if len(x)%q.d != 0 || len(out) != len(x)/q.d {
		return fmt.Errorf("faiss: quantizer: %d values and %d outputs for dimension %d", len(x), len(out), q.d)
	}
	n := len(out)
	if n == 0 {
		return nil
	}
	dist := make([]float32, n)
	labels := make([]int64, n)
	if c := C.faiss_Index_search((*C.FaissIndex)(q.idx), C.idx_t(n), (*C.float)(unsafe.Pointer(&x[0])), 1,
		(*C.float)(unsafe.Pointer(&dist[0])), (*C.idx_t)(unsafe.Pointer(&labels[0]))); c != 0 {
		return fmt.Errorf("faiss: quantizer: assign %d vectors: %s", n, lastError())
	}
	for i, l := range labels {
		if l < 0 || l >= int64(q.k) {
			return fmt.Errorf("faiss: quantizer: vector %d assigned to %d of %d centroids (not finite?)", i, l, q.k)
		}
		out[i] = int32(l)
	}
	return nil
}

// Close frees the native index; it is idempotent.
func (q *Quantizer) Close() error {
	if q.idx != nil {
		C.faiss_Index_free((*C.FaissIndex)(q.idx))
		q.idx = nil
	}
	return nil
}
