package latecollect

import (
	"math"
	"math/rand/v2"
	"testing"
)

// codeKernelValue draws a value for the code kernels' tests: mostly
// random, often one of a few values that make ties, signed zeros and
// infinities.
func codeKernelValue(r *rand.Rand) float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.5, float32(math.Inf(-1)), float32(math.Inf(1))}
	if r.IntN(3) == 0 {
		return special[r.IntN(len(special))]
	}
	return float32(r.NormFloat64())
}

func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// The assembly centroidMax gives the Go version's bits, ties between +0
// and -0 included, from -Inf or from arbitrary starting values, and leaves
// best beyond stride alone.
func TestCentroidMaxAVX2MatchesGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this machine: the portable kernel is the only one")
	}
	r := rand.New(rand.NewPCG(3, 5))
	const rows = 70
	for _, stride := range []int{8, 16, 24, 32, 40, 64, 96, 136} {
		table := make([]float32, rows*stride)
		for i := range table {
			table[i] = codeKernelValue(r)
		}
		for _, n := range []int{0, 1, 2, 7, 300} {
			cids := make([]uint16, n)
			for i := range cids {
				cids[i] = uint16(r.IntN(rows))
			}
			for _, start := range []string{"-Inf", "random"} {
				want := make([]float32, stride+5)
				for i := range want {
					want[i] = codeKernelValue(r)
				}
				if start == "-Inf" {
					for j := range stride {
						want[j] = float32(math.Inf(-1))
					}
				}
				got, direct := append([]float32(nil), want...), append([]float32(nil), want...)
				centroidMaxGo(want, table, stride, cids)
				centroidMax(got, table, stride, cids)
				if i := sameBits(got, want); i >= 0 {
					t.Fatalf("stride=%d n=%d start=%s: best[%d] = %v (%#x), Go %v (%#x)", stride, n, start, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
				var dummy uint16
				p := &dummy
				if n > 0 {
					p = &cids[0]
				}
				if !centroidMaxAVX2(&direct[0], &table[0], stride, rows, p, n) {
					t.Fatalf("stride=%d n=%d: centroidMaxAVX2 refused ids below %d", stride, n, rows)
				}
				if i := sameBits(direct, want); i >= 0 {
					t.Fatalf("stride=%d n=%d start=%s: centroidMaxAVX2 best[%d] = %v, Go %v", stride, n, start, i, direct[i], want[i])
				}
			}
		}
	}
}

// An id beyond the table stops the assembly kernel and makes centroidMax
// panic as the Go version does.
func TestCentroidMaxOutOfRange(t *testing.T) {
	const stride, rows = 40, 10
	table := make([]float32, rows*stride)
	best := make([]float32, stride)
	cids := []uint16{1, 2, rows, 3}
	if useAVX2 && centroidMaxAVX2(&best[0], &table[0], stride, rows, &cids[0], len(cids)) {
		t.Errorf("centroidMaxAVX2 accepted id %d of a %d-row table", rows, rows)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("centroidMax did not panic on id %d of a %d-row table", rows, rows)
		}
	}()
	centroidMax(best, table, stride, cids)
}

// The assembly decodeResidual1 gives the Go version's bits for every code
// byte value.
func TestDecodeResidual1AVX2MatchesGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this machine: the portable kernel is the only one")
	}
	r := rand.New(rand.NewPCG(9, 4))
	for _, dim := range []int{8, 16, 24, 32, 40, 56, 128, 384, 2048} {
		cent, lo, hi := make([]float32, dim), make([]float32, dim), make([]float32, dim)
		for i := range dim {
			cent[i], lo[i], hi[i] = codeKernelValue(r), codeKernelValue(r), codeKernelValue(r)
		}
		for trial := range 20 {
			code := make([]byte, dim/8)
			for b := range code {
				code[b] = byte(r.Uint32())
				switch trial {
				case 0:
					code[b] = 0
				case 1:
					code[b] = 0xff
				case 2:
					code[b] = byte(b)
				}
			}
			want, got, direct := make([]float32, dim), make([]float32, dim), make([]float32, dim)
			decodeResidual1Go(want, cent, lo, hi, code)
			decodeResidual1(got, cent, lo, hi, code)
			decodeResidual1AVX2(&direct[0], &cent[0], &lo[0], &hi[0], &code[0], dim)
			if i := sameBits(got, want); i >= 0 {
				t.Fatalf("dim=%d trial=%d: dst[%d] = %v, Go %v", dim, trial, i, got[i], want[i])
			}
			if i := sameBits(direct, want); i >= 0 {
				t.Fatalf("dim=%d trial=%d: decodeResidual1AVX2 dst[%d] = %v, Go %v", dim, trial, i, direct[i], want[i])
			}
		}
	}
}

// codeKernelModes runs f as sub-benchmark "go" with the portable kernels
// and, where the CPU has AVX2, "avx2" with the assembly ones.
func codeKernelModes(b *testing.B, f func(b *testing.B)) {
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	modes := []bool{false}
	if saved {
		modes = append(modes, true)
	}
	for _, asm := range modes {
		name := "go"
		if asm {
			name = "avx2"
		}
		useAVX2 = asm
		b.Run(name, f)
	}
}

// BenchmarkCentroidMax measures stage 3 of residual search on one
// document: 327 tokens' centroid rows (stride 32, from a table of 4096
// centroids) folded into a query's best scores. ns/token is per document
// token.
func BenchmarkCentroidMax(b *testing.B) {
	const stride, rows, tokens = 32, 4096, 327
	r := rand.New(rand.NewPCG(1, 2))
	table := make([]float32, rows*stride)
	for i := range table {
		table[i] = float32(r.NormFloat64())
	}
	cids := make([]uint16, tokens)
	for i := range cids {
		cids[i] = uint16(r.IntN(rows))
	}
	best := make([]float32, stride)
	codeKernelModes(b, func(b *testing.B) {
		for b.Loop() {
			for j := range best {
				best[j] = float32(math.Inf(-1))
			}
			centroidMax(best, table, stride, cids)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tokens, "ns/token")
	})
}

// BenchmarkDecodeResidual1 measures decoding one document of 327 384-d
// tokens from centroid ids and one-bit codes. ns/token is per token.
func BenchmarkDecodeResidual1(b *testing.B) {
	const dim, rows, tokens = 384, 4096, 327
	r := rand.New(rand.NewPCG(3, 4))
	cent := make([]float32, rows*dim)
	for i := range cent {
		cent[i] = float32(r.NormFloat64())
	}
	lo, hi := make([]float32, dim), make([]float32, dim)
	for i := range dim {
		lo[i], hi[i] = -float32(r.Float64()), float32(r.Float64())
	}
	cids := make([]uint16, tokens)
	for i := range cids {
		cids[i] = uint16(r.IntN(rows))
	}
	codes := make([]byte, tokens*dim/8)
	for i := range codes {
		codes[i] = byte(r.Uint32())
	}
	dst := make([]float32, tokens*dim)
	codeKernelModes(b, func(b *testing.B) {
		for b.Loop() {
			for t, c := range cids {
				decodeResidual1(dst[t*dim:(t+1)*dim], cent[int(c)*dim:(int(c)+1)*dim], lo, hi, codes[t*dim/8:(t+1)*dim/8])
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tokens, "ns/token")
	})
}
