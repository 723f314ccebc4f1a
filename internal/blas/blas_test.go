package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestMulT(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	const m, n, k, ldc = 37, 5, 24, 8
	a, b := make([]float32, m*k), make([]float32, n*k)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range b {
		b[i] = float32(r.NormFloat64())
	}
	c := make([]float32, m*ldc)
	for i := range c {
		c[i] = 42
	}
	if err := MulT(a, m, b, n, k, c, ldc); err != nil {
		t.Fatal(err)
	}
	for i := range m {
		for j := range ldc {
			if j >= n {
				if c[i*ldc+j] != 42 {
					t.Fatalf("c[%d][%d] = %v: written past n", i, j, c[i*ldc+j])
				}
				continue
			}
			var want float64
			for x := range k {
				want += float64(a[i*k+x]) * float64(b[j*k+x])
			}
			if math.Abs(float64(c[i*ldc+j])-want) > 1e-4 {
				t.Fatalf("c[%d][%d] = %v, want %v", i, j, c[i*ldc+j], want)
			}
		}
	}
	if err := MulT(a, m, b, n, k, c[:10], ldc); err == nil {
		t.Error("MulT into too small a c: no error")
	}
}

func TestMulV(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	const n, k = 41, 19
	a, x := make([]float32, n*k), make([]float32, k)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]float32, n+1)
	y[n] = 42
	if err := MulV(a, n, k, x, y); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		var want float64
		for j := range k {
			want += float64(a[i*k+j]) * float64(x[j])
		}
		if math.Abs(float64(y[i])-want) > 1e-4 {
			t.Fatalf("y[%d] = %v, want %v", i, y[i], want)
		}
	}
	if y[n] != 42 {
		t.Fatal("written past n")
	}
	if err := MulV(a, n, k, x, y[:n-1]); err == nil {
		t.Error("MulV into too small a y: no error")
	}
}

func BenchmarkMulTCentroids(b *testing.B) {
	const nlist, nq, dim = 8192, 32, 384
	cent, q, c := make([]float32, nlist*dim), make([]float32, nq*dim), make([]float32, nlist*nq)
	for i := range cent {
		cent[i] = float32(i%7) * 0.01
	}
	for i := range q {
		q[i] = float32(i%5) * 0.01
	}
	for range b.N {
		MulT(cent, nlist, q, nq, dim, c, nq)
	}
}

// TestMulVPositionIndependent checks that a row's product is the same, to
// the bit, whatever the number of rows and wherever the row sits: without
// the grouping MulV does, OpenBLAS rounds a trailing partial group of
// rows differently (about one row in ten differed here).
func TestMulVPositionIndependent(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, k := range []int{7, 32, 384, 1000} {
		const n = 203
		a, x := make([]float32, n*k), make([]float32, k)
		for i := range a {
			a[i] = float32(r.NormFloat64())
		}
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		full := make([]float32, n)
		if err := MulV(a, n, k, x, full); err != nil {
			t.Fatal(err)
		}
		for start := range 20 {
			for _, m := range []int{1, 2, 3, 5, 16, 17, 31, 64, 100, n - start} {
				if start+m > n {
					continue
				}
				y := make([]float32, m)
				if err := MulV(a[start*k:(start+m)*k], m, k, x, y); err != nil {
					t.Fatal(err)
				}
				for i := range m {
					if y[i] != full[start+i] {
						t.Fatalf("k %d: row %d scores %v among rows %d..%d and %v among all %d", k, start+i, y[i], start, start+m-1, full[start+i], n)
					}
				}
			}
		}
	}
}
