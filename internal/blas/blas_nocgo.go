//go:build !cgo

// Package blas is Tandem's narrow binding of OpenBLAS's matrix product;
// without cgo, MulT and MulV compute it in Go.
package blas

import "fmt"

// MulT sets c[i*ldc+j] to the inner product of row i of a with row j of b.
func MulT(a []float32, m int, b []float32, n, k int, c []float32, ldc int) error {
	if m <= 0 || n <= 0 || k <= 0 {
		return nil
	}
	if len(a) < m*k || len(b) < n*k || ldc < n || len(c) < (m-1)*ldc+n {
		return fmt.Errorf("blas: MulT: sizes do not fit")
	}
	for i := range m {
		for j := range n {
			var s float32
			for t := range k {
				s += a[i*k+t] * b[j*k+t]
			}
			c[i*ldc+j] = s
		}
	}
	return nil
}

// MulV sets y[i] to the inner product of row i of a with x, for i < n.
func MulV(a []float32, n, k int, x, y []float32) error {
	if n <= 0 || k <= 0 {
		return nil
	}
	if len(a) < n*k || len(x) < k || len(y) < n {
		return fmt.Errorf("blas: MulV: sizes do not fit")
	}
	for i := range n {
		var s float32
		for t := range k {
			s += a[i*k+t] * x[t]
		}
		y[i] = s
	}
	return nil
}
