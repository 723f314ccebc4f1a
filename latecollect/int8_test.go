package latecollect

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The VNNI and AVX2 kernels and the portable code give the same maxima,
// bit for bit up to the sign of zero, for query lengths across chunks of
// 32, documents across tiles of 8 and 2 and dimensions the kernels take;
// and all equal the float maxima of the dequantised values to within the
// quantisation's error.
func TestMaxSimI8Kernels(t *testing.T) {
	saved := struct{ vnni, avx2 bool }{useVNNI, useAVX2}
	defer func() { useVNNI, useAVX2 = saved.vnni, saved.avx2 }()
	kernels := []struct {
		name       string
		vnni, avx2 bool
	}{{"vnni", true, true}, {"avx2", false, true}}
	for _, k := range kernels {
		if (k.vnni && !saved.vnni) || (k.avx2 && !saved.avx2) {
			t.Logf("no %s on this CPU: not checked", k.name)
		}
	}
	r := rand.New(rand.NewPCG(3, 8))
	for _, dim := range []int{64, 128, 384, 36} {
		for _, nq := range []int{1, 7, 20, 32, 33, 70} {
			for _, nd := range []int{1, 3, 8, 9, 17, 238} {
				q, d := randomUnit(r, nq, dim), randomUnit(r, nd, dim)
				if nd > 1 {
					// Extremes: a row of ±max, whose values quantise to ±127.
					for k := range dim {
						d[k] = float32(1 - 2*(k%2))
					}
				}
				blob, err := EncodeTokens(d, dim, I8)
				if err != nil {
					t.Fatal(err)
				}
				h, err := parseHeader(blob)
				if err != nil {
					t.Fatal(err)
				}
				rows := blob[headerSize:]

				useVNNI, useAVX2 = false, false
				goBest := make([]float32, nq)
				newQueryI8(q, dim).maxSim(rows, h.count, goBest, nil)

				deq := make([]float32, nd*dim)
				decodeRows(blob, h, 0, nd, deq)
				want := make([]float32, nq)
				fillInf(want)
				maxSimGo(q, deq, dim, nil, want)
				for i := range want {
					// Query quantisation: |q - q8*s| ≤ s/2 per value.
					qmax := float32(0)
					for _, v := range q[i*dim : (i+1)*dim] {
						qmax = max(qmax, float32(math.Abs(float64(v))))
					}
					var dn float64
					for j := range nd {
						var n2 float64
						for _, v := range deq[j*dim : (j+1)*dim] {
							n2 += float64(v) * float64(v)
						}
						dn = max(dn, math.Sqrt(n2))
					}
					tol := float64(qmax/127/2)*math.Sqrt(float64(dim))*dn + 1e-5
					if diff := math.Abs(float64(goBest[i] - want[i])); diff > tol {
						t.Fatalf("dim %d, %d×%d: token %d: int8 %v, float %v, beyond %v", dim, nq, nd, i, goBest[i], want[i], tol)
					}
				}
				for _, k := range kernels {
					if (k.vnni && !saved.vnni) || (k.avx2 && !saved.avx2) {
						continue
					}
					useVNNI, useAVX2 = k.vnni, k.avx2
					qi := newQueryI8(q, dim)
					if want := map[bool]int{true: i8VNNI, false: i8AVX2}[k.vnni && dim%64 == 0]; qi.kernel != want {
						t.Fatalf("%s, dim %d: kernel %d, want %d", k.name, dim, qi.kernel, want)
					}
					got := make([]float32, nq)
					qi.maxSim(rows, h.count, got, nil)
					for i := range got {
						if got[i] != goBest[i] {
							t.Fatalf("dim %d, %d×%d: token %d: %s %v, Go %v", dim, nq, nd, i, k.name, got[i], goBest[i])
						}
					}
				}
			}
		}
	}
	// No rows: every maximum is -Inf, as maxSim gives.
	best := []float32{1, 2}
	newQueryI8(make([]float32, 2*64), 64).maxSim(nil, 0, best, nil)
	if !math.IsInf(float64(best[0]), -1) || !math.IsInf(float64(best[1]), -1) {
		t.Errorf("no rows: %v, want -Inf", best)
	}
}

// Decoding I8 rows with AVX-512 gives the portable decoding's bits.
func TestDecodeI8AVX512(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU: only the portable decoding runs")
	}
	defer func() { useAVX512 = true }()
	r := rand.New(rand.NewPCG(5, 5))
	for _, dim := range []int{16, 48, 384} {
		d := randomUnit(r, 37, dim)
		d[3] = -1 // a value quantised to -127
		blob, err := EncodeTokens(d, dim, I8)
		if err != nil {
			t.Fatal(err)
		}
		h, _ := parseHeader(blob)
		got, want := make([]float32, len(d)), make([]float32, len(d))
		useAVX512 = true
		decodeRows(blob, h, 0, h.count, got)
		useAVX512 = false
		decodeRows(blob, h, 0, h.count, want)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("dim %d: value %d: AVX-512 %v, portable %v", dim, i, got[i], want[i])
			}
		}
	}
}

// An I8 row decoded and encoded again gives the same bytes, whatever its
// values' magnitudes, so supplied tokens that were read back rank as they
// did.
func TestEncodeI8Idempotent(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, mag := range []float64{1e-30, 1e-3, 1, 3.7, 1e4} {
		for range 20 {
			d := randomUnit(r, 50, 48)
			for i := range d {
				d[i] *= float32(mag * (1 + r.Float64()))
			}
			blob, err := EncodeTokens(d, 48, I8)
			if err != nil {
				t.Fatal(err)
			}
			back, dim, err := DecodeTokens(blob)
			if err != nil {
				t.Fatal(err)
			}
			again, err := EncodeTokens(back, dim, I8)
			if err != nil {
				t.Fatal(err)
			}
			if string(again) != string(blob) {
				t.Fatalf("magnitude %g: encoding the decoded rows changed the blob", mag)
			}
		}
	}
}
