package latecollect

import (
	"math"
	"math/rand/v2"
	"testing"
)

func skipWithoutAVX2(t *testing.T) {
	t.Helper()
	if !useAVX2 {
		t.Skip("no AVX2 and FMA on this machine: the portable kernel is the only one")
	}
}

// On small integers every summation order is exact, so the assembly
// kernel must match one dot product per pair bit for bit, for query and
// document lengths around its block sizes, masked or not.
func TestMaxSimAVX2MatchesPairwise(t *testing.T) {
	skipWithoutAVX2(t)
	for _, dim := range []int{8, 16, 24, 384} {
		for nq := range 10 {
			for nd := range 7 {
				q, d := make([]float32, nq*dim), make([]float32, nd*dim)
				for i := range q {
					q[i] = float32((i*7)%11) - 5
				}
				for i := range d {
					d[i] = float32((i*5)%13) - 6
				}
				none, last := make([]bool, nd), make([]bool, nd)
				if nd > 0 {
					last[nd-1] = true
				}
				for _, mask := range [][]bool{nil, alternate(nd), none, last} {
					got := make([]float32, nq)
					fillInf(got)
					maxSimAVX2(q, d, dim, mask, got)
					for i, want := range naiveMaxSim(q, d, dim, mask, nq) {
						if got[i] != want {
							t.Fatalf("dim=%d nq=%d nd=%d mask=%v: best[%d] = %v, want %v", dim, nq, nd, mask, i, got[i], want)
						}
					}
				}
			}
		}
	}
}

// On real-valued unit vectors the two kernels differ only by rounding,
// and the assembly kernel gives a query token the same maximum whether it
// is scored alone or within a block.
func TestMaxSimAVX2CloseToGo(t *testing.T) {
	skipWithoutAVX2(t)
	r := rand.New(rand.NewPCG(7, 7))
	const dim = 384
	for _, n := range [][2]int{{1, 1}, {5, 3}, {20, 238}, {32, 511}} {
		nq, nd := n[0], n[1]
		q, d := randomUnit(r, nq, dim), randomUnit(r, nd, dim)
		fast, slow := make([]float32, nq), make([]float32, nq)
		fillInf(fast)
		fillInf(slow)
		maxSimAVX2(q, d, dim, nil, fast)
		maxSimGo(q, d, dim, nil, slow)
		for i := range nq {
			if math.Abs(float64(fast[i]-slow[i])) > 1e-6 {
				t.Errorf("nq=%d nd=%d: best[%d] AVX2 %v, Go %v", nq, nd, i, fast[i], slow[i])
			}
			alone := []float32{float32(math.Inf(-1))}
			maxSimAVX2(q[i*dim:(i+1)*dim], d, dim, nil, alone)
			if alone[0] != fast[i] {
				t.Errorf("nq=%d nd=%d: best[%d] %v in a block, %v alone", nq, nd, i, fast[i], alone[0])
			}
		}
	}
}

// The F16C decoder gives every float16 value (NaNs aside, which it makes
// quiet) the same float32 as the table, whatever the length.
func TestDecodeF16F16CMatchesTable(t *testing.T) {
	if !useF16C {
		t.Skip("no F16C on this machine")
	}
	const n = 1 << 16
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float16Value(uint16(i))
	}
	raw := make([]byte, headerSize+2*n)
	for i := range n {
		raw[headerSize+2*i], raw[headerSize+2*i+1] = byte(i), byte(i>>8)
	}
	for _, rows := range []int{1, 3, 8, 1 << 16} {
		h := blobHeader{enc: F16, dim: n / rows, count: rows}
		for _, from := range []int{0, rows / 2} {
			got := make([]float32, (rows-from)*h.dim)
			decodeRows(raw, h, from, rows, got)
			for k, g := range got {
				want := vals[from*h.dim+k]
				if math.IsNaN(float64(want)) {
					if !math.IsNaN(float64(g)) {
						t.Fatalf("rows=%d from=%d: value %#04x decoded to %v, want NaN", rows, from, from*h.dim+k, g)
					}
				} else if math.Float32bits(g) != math.Float32bits(want) {
					t.Fatalf("rows=%d from=%d: value %#04x decoded to %v, want %v", rows, from, from*h.dim+k, g, want)
				}
			}
		}
	}
}

// Scoring a blob a block of rows at a time gives exactly the maxima of
// decoding it whole, for every encoding and for lengths around the block
// size, whichever kernel runs.
func TestMaxSimBlobMatchesWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, dim := range []int{8, 384} {
		rows := exactBlockBytes / (4 * dim)
		for _, nd := range []int{0, 1, rows - 1, rows, rows + 1, 2*rows + 3} {
			for _, enc := range []Encoding{F32, F16, I8} {
				q, d := randomUnit(r, 7, dim), randomUnit(r, nd, dim)
				blob, err := EncodeTokens(d, dim, enc)
				if err != nil {
					t.Fatal(err)
				}
				h, err := parseHeader(blob)
				if err != nil {
					t.Fatal(err)
				}
				whole := make([]float32, nd*dim)
				decodeRows(blob, h, 0, nd, whole)
				want, got := make([]float32, 7), make([]float32, 7)
				maxSim(q, whole, dim, nil, want)
				var buf []float32
				ql := newQueryLanes(q, dim)
				for i := range 4 { // the second call reuses buf; the last two lay q out first
					if i < 2 {
						buf = maxSimBlob(q, nil, blob, h, got, buf)
					} else {
						buf = maxSimBlob(q, ql, blob, h, got, buf)
					}
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("dim=%d nd=%d enc=%d: best[%d] = %v by blocks, %v whole", dim, nd, enc, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// maxOf with AVX2 and without gives the largest value, passing over NaNs,
// at every length and position of the largest.
func TestMaxOfAVX2MatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 9))
	defer func(v bool) { useAVX2 = v }(useAVX2)
	for _, n := range []int{0, 1, 7, 31, 32, 33, 64, 100, 1024, 1031} {
		for trial := range 20 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(r.NormFloat64())
				if trial%3 == 0 && r.IntN(10) == 0 {
					v[i] = float32(math.NaN())
				}
			}
			want := float32(math.Inf(-1))
			for _, x := range v {
				if x > want {
					want = x
				}
			}
			for _, avx := range []bool{false, haveAVX2()} {
				useAVX2 = avx
				if got := maxOf(v); got != want {
					t.Fatalf("n %d, trial %d, AVX2 %v: max %v, want %v", n, trial, avx, got, want)
				}
			}
		}
	}
}

// TestEncodeF16F16C compares the F16C conversion with float16Bits on the
// float32 values that round to float16 differently: for every exponent
// from below float16's subnormals to its largest, every mantissa whose low
// 13 bits are 0, 0x0fff, 0x1000 (a tie) or 0x1001 and whose high bits are
// any of 64 patterns, both signs, and a million random finite values in
// range.
func TestEncodeF16F16C(t *testing.T) {
	if !useF16C {
		t.Skip("skipping: no F16C on this CPU")
	}
	var vals []float32
	for exp := uint32(127 - 26); exp <= 127+15; exp++ {
		for hi := uint32(0); hi < 64; hi++ {
			for _, lo := range []uint32{0, 0x0fff, 0x1000, 0x1001, 0x1fff} {
				m := (hi*0x1ffff/63)<<13&0x7fe000 | lo
				for _, sign := range []uint32{0, 1 << 31} {
					v := math.Float32frombits(sign | exp<<23 | m)
					if math.Abs(float64(v)) <= MaxF16 {
						vals = append(vals, v)
					}
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 1 << 20 {
		vals = append(vals, float32((r.Float64()*2-1)*math.Pow(2, float64(r.IntN(40)-24)))*MaxF16/65536)
	}
	vals = append(vals, 0, float32(math.Copysign(0, -1)), MaxF16, -MaxF16, math.SmallestNonzeroFloat32)
	for len(vals)%8 != 0 {
		vals = append(vals, 1)
	}
	got := make([]byte, 2*len(vals))
	encodeF16F16C(&got[0], &vals[0], len(vals))
	for i, v := range vals {
		if g, w := uint16(got[2*i])|uint16(got[2*i+1])<<8, float16Bits(v); g != w {
			t.Fatalf("%v (%#08x): F16C gives %#04x, float16Bits %#04x", v, math.Float32bits(v), g, w)
		}
	}
}

// The AVX-512 kernels give each product the same value wherever its row
// falls (in a whole tile, in the padded last one, alone, or among masked
// rows), for query lengths that fill one or two 16- and 32-token chunks
// partly or wholly; and the values are those of the portable code to
// within float32 rounding.
func TestMaxSimAVX512(t *testing.T) {
	if !useAVX512 {
		t.Skip("skipping: no AVX-512 on this CPU")
	}
	r := rand.New(rand.NewPCG(8, 8))
	for _, dim := range []int{8, 128, 384} {
		for _, nq := range []int{1, 15, 16, 17, 32, 33, 48, 49, 70} {
			for _, nd := range []int{1, 7, 8, 9, 23} {
				q, d := randomUnit(r, nq, dim), randomUnit(r, nd, dim)
				got := make([]float32, nq)
				maxSim(q, d, dim, nil, got)
				ql := newQueryLanes(q, dim)
				// Each row alone, and the mask that keeps one row.
				alone := make([]float32, nq)
				fillInf(alone)
				one := make([]float32, nq)
				for j := range nd {
					b := make([]float32, nq)
					fillInf(b)
					ql.maxSimInto(d[j*dim:(j+1)*dim], b, nil)
					mask := make([]bool, nd)
					mask[j] = true
					maxSim(q, d, dim, mask, one)
					for i := range nq {
						if one[i] != b[i] {
							t.Fatalf("dim %d nq %d nd %d: row %d masked %v, alone %v", dim, nq, nd, j, one[i], b[i])
						}
						alone[i] = max(alone[i], b[i])
					}
				}
				want := make([]float32, nq)
				fillInf(want)
				maxSimGo(q, d, dim, nil, want)
				for i := range nq {
					if got[i] != alone[i] {
						t.Fatalf("dim %d nq %d nd %d: best[%d] %v in tiles, %v row by row", dim, nq, nd, i, got[i], alone[i])
					}
					if math.Abs(float64(got[i]-want[i])) > 1e-5 {
						t.Fatalf("dim %d nq %d nd %d: best[%d] %v, portable %v", dim, nq, nd, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestScoreCentroidsAVX512 checks that the AVX-512 centroid scores are,
// to the bit, the products maxSimInto takes the maximum of (each row
// alone), whatever tile or padded tail a centroid falls in and however the
// centroids are split between workers; that the lanes past the query's
// tokens are zero; and that they are BLAS's products to within float32
// rounding.
func TestScoreCentroidsAVX512(t *testing.T) {
	if !useAVX512 {
		t.Skip("skipping: no AVX-512 on this CPU")
	}
	r := rand.New(rand.NewPCG(9, 9))
	for _, dim := range []int{8, 384} {
		for _, nq := range []int{1, 16, 17, 32} {
			for _, nlist := range []int{1, 9, 1024, 2051} {
				q, cent := randomUnit(r, nq, dim), randomUnit(r, nlist, dim)
				ql := newQueryLanes(q, dim)
				stride := centroidStride(nq, ql)
				if stride != chunkLanes(nq) {
					t.Fatalf("nq %d: stride %d, want the lanes %d", nq, stride, chunkLanes(nq))
				}
				blasStride := (nq + 7) &^ 7
				want := make([]float32, nlist*blasStride)
				if err := scoreCentroids(q, nq, dim, cent, blasStride, want, 2, nil); err != nil {
					t.Fatal(err)
				}
				for _, workers := range []int{1, 2} {
					table := make([]float32, nlist*stride)
					for i := range table {
						table[i] = 42
					}
					if err := scoreCentroids(q, nq, dim, cent, stride, table, workers, ql); err != nil {
						t.Fatal(err)
					}
					for c := range nlist {
						b := make([]float32, nq)
						fillInf(b)
						ql.maxSimInto(cent[c*dim:(c+1)*dim], b, nil)
						for l := range stride {
							got := table[c*stride+l]
							switch {
							case l >= nq && got != 0:
								t.Fatalf("dim %d nq %d nlist %d: centroid %d lane %d past the query: %v", dim, nq, nlist, c, l, got)
							case l < nq && got != b[l]:
								t.Fatalf("dim %d nq %d nlist %d workers %d: centroid %d token %d: %v, maxSimInto %v", dim, nq, nlist, workers, c, l, got, b[l])
							case l < nq && math.Abs(float64(got-want[c*blasStride+l])) > 1e-5:
								t.Fatalf("dim %d nq %d nlist %d: centroid %d token %d: %v, BLAS %v", dim, nq, nlist, c, l, got, want[c*blasStride+l])
							}
						}
					}
				}
			}
		}
	}
}
