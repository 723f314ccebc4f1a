//go:build cgo

// Package blas is Tandem's narrow binding of the two BLAS routines it
// calls directly, single-precision matrix-matrix and matrix-vector
// products, from the OpenBLAS that FAISS links (scripts/setup-faiss.sh
// installs libopenblas-dev).
//
// Loading the package makes OpenBLAS single-threaded for the whole
// process, FAISS included: OpenBLAS's worker threads spin after each
// product and take the cores a search's own goroutines and ONNX Runtime
// need, which costs searches far more than FAISS's k-means, which
// parallelises its own loops, loses (latecollect/README.md has the
// measurements).
package blas

/*
#cgo LDFLAGS: -lopenblas
extern void openblas_set_num_threads(int);
extern void cblas_sgemm(int order, int transA, int transB, int m, int n, int k,
	float alpha, const float *a, int lda, const float *b, int ldb,
	float beta, float *c, int ldc);
extern void cblas_sgemv(int order, int trans, int m, int n, float alpha,
	const float *a, int lda, const float *x, int incx, float beta, float *y, int incy);
*/
import "C"

import "fmt"

func init() { C.openblas_set_num_threads(1) }

const (
	rowMajor = 101
	noTrans  = 111
	trans    = 112
)

// MulT sets c[i*ldc+j] to the inner product of row i of a with row j of
// b, for i < m and j < n: a holds m rows of k values, b n rows of k values
// and c has room for m rows of ldc ≥ n values.
func MulT(a []float32, m int, b []float32, n, k int, c []float32, ldc int) error {
	if m <= 0 || n <= 0 || k <= 0 {
		return nil
	}
	if len(a) < m*k || len(b) < n*k || ldc < n || len(c) < (m-1)*ldc+n {
		return fmt.Errorf("blas: MulT: %d×%d by (%d×%d)ᵀ into %d values with stride %d: sizes do not fit", m, k, n, k, len(c), ldc)
	}
	C.cblas_sgemm(rowMajor, noTrans, trans, C.int(m), C.int(n), C.int(k),
		1, (*C.float)(&a[0]), C.int(k), (*C.float)(&b[0]), C.int(k),
		0, (*C.float)(&c[0]), C.int(ldc))
	return nil
}

// MulV sets y[i] to the inner product of row i of a with x, for i < n: a
// holds n rows of k values. For one query against many rows it reads a
// once, where MulT would first copy it. Each y[i] is a function of row i
// and x alone, to the bit: it does not depend on n or on where the row
// sits, so a vector scores the same in any index that holds it (a
// collection's shards and the collection on one node, say).
func MulV(a []float32, n, k int, x, y []float32) error {
	if n <= 0 || k <= 0 {
		return nil
	}
	if len(a) < n*k || len(x) < k || len(y) < n {
		return fmt.Errorf("blas: MulV: %d×%d by %d values into %d: sizes do not fit", n, k, len(x), len(y))
	}
	// OpenBLAS computes rows in groups (of 4 with the kernels it picks on
	// x86-64) and a trailing partial group with another kernel, which
	// rounds differently: a row's product would then depend on how many
	// rows follow it. Whole groups of mulVGroup rows go through the main
	// kernel here; the last partial group is copied, padded with zero rows.
	main := n - n%mulVGroup
	if main > 0 {
		C.cblas_sgemv(rowMajor, noTrans, C.int(main), C.int(k), 1, (*C.float)(&a[0]), C.int(k),
			(*C.float)(&x[0]), 1, 0, (*C.float)(&y[0]), 1)
	}
	if rest := n - main; rest > 0 {
		pad := make([]float32, mulVGroup*k+mulVGroup)
		copy(pad, a[main*k:n*k])
		out := pad[mulVGroup*k:]
		C.cblas_sgemv(rowMajor, noTrans, C.int(mulVGroup), C.int(k), 1, (*C.float)(&pad[0]), C.int(k),
			(*C.float)(&x[0]), 1, 0, (*C.float)(&out[0]), 1)
		copy(y[main:n], out)
	}
	return nil
}

// mulVGroup is a multiple of every row group OpenBLAS's single-precision
// matrix-vector kernels use.
const mulVGroup = 16
