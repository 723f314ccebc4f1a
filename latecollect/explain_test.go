package latecollect

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// kernelConfigs are the exact-stage kernels this CPU can run: AVX-512
// (when present), AVX2 (when present) and portable Go. run sets each in
// turn.
func kernelConfigs(t *testing.T, run func(t *testing.T)) {
	saved := struct{ avx2, avx512, vnni bool }{useAVX2, useAVX512, useVNNI}
	defer func() { useAVX2, useAVX512, useVNNI = saved.avx2, saved.avx512, saved.vnni }()
	for _, k := range []struct {
		name         string
		avx2, avx512 bool
	}{{"avx512", saved.avx2, true}, {"avx2", true, false}, {"go", false, false}} {
		if (k.avx512 && !saved.avx512) || (k.avx2 && !saved.avx2) {
			continue
		}
		useAVX2, useAVX512, useVNNI = k.avx2, k.avx512, k.avx512 && saved.vnni
		t.Run(k.name, run)
	}
}

// TestExplainMatchesExactScore checks, with every kernel this CPU has,
// every encoding and both the exact stage's and Reference's kernels, on
// random shapes (query tokens across the AVX-512 chunk widths of 16 and
// 32, documents across tiles of 8 and blocks of exactBlockBytes,
// dimensions that take the kernels or not), that Explain's maxima are
// bit for bit scoreBlob's, its score the exact stage's, and each row the
// first whose product is the maximum.
func TestExplainMatchesExactScore(t *testing.T) {
	kernelConfigs(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 30))
		for c := range 150 {
			dim := []int{384, 128, 16, 8, 12}[c%5]
			nq := []int{1, 3, 4, 5, 16, 17, 31, 32, 33, 40, 64}[r.IntN(11)]
			nd := []int{1, 2, 7, 8, 9, 33, 100, 327}[r.IntN(8)]
			enc := []Encoding{F32, F16, I8}[c%3]
			q := randomUnit(r, nq, dim)
			blob, err := EncodeTokens(randomUnit(r, nd, dim), dim, enc)
			if err != nil {
				t.Fatal(err)
			}
			h, err := parseHeader(blob)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []Mode{Candidates, Reference} {
				k := newExactKernels(q, dim, newQueryLanes(q, dim), mode)
				best := make([]float32, nq)
				scoreBlob(k, blob, h, best, &blobScratch{})
				if enc != I8 && k.qi != nil {
					t.Fatalf("case %d: the query was quantised for a %s blob", c, enc)
				}
				what := fmt.Sprintf("case %d (dim %d, %d query tokens, %d document tokens, %s, %s)", c, dim, nq, nd, enc, mode)
				for _, s := range []Scoring{ScoreAvgMax, ScoreSumMax} {
					ex := explainIn(t, q, dim, blob, s, mode)
					if ex.Score != combine(s, best) {
						t.Fatalf("%s %s: score %v, exact stage %v", what, s, ex.Score, combine(s, best))
					}
					for i := range best {
						if ex.Max[i] != best[i] {
							t.Fatalf("%s: query token %d: max %v, exact stage %v", what, i, ex.Max[i], best[i])
						}
					}
					dot, n := productsOf(t, k, blob)
					checkRows(t, what, dot, n, ex)
				}
			}
		}
	})
}

func explain(t *testing.T, q []float32, dim int, blob []byte, s Scoring) Explanation {
	t.Helper()
	return explainIn(t, q, dim, blob, s, Candidates)
}

// explainIn explains blob's score as a search in mode gives it.
func explainIn(t *testing.T, q []float32, dim int, blob []byte, s Scoring, mode Mode) Explanation {
	t.Helper()
	x, err := NewExplainer(q, dim, s, mode)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := x.Explain(blob)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

// productsOf returns, for a query made ready by k and a blob, the
// function giving the product of query token i with row j as the
// kernels compute it, in float64, and the blob's row count: float32 over
// the decoded rows, or the int8 sum scaled for an I8 blob when k
// quantises.
func productsOf(t *testing.T, k *exactKernels, blob []byte) (func(i, j int) float64, int) {
	t.Helper()
	h, err := parseHeader(blob)
	if err != nil {
		t.Fatal(err)
	}
	dim := h.dim
	if qi := k.i8(); h.enc == I8 && k.quantise {
		rows := blob[headerSize:]
		return func(i, j int) float64 {
			row := rows[j*(4+dim) : (j+1)*(4+dim)]
			s := math.Float32frombits(binary.LittleEndian.Uint32(row))
			var acc int32
			for kk := range dim {
				acc += int32(qi.q8[i*dim+kk]) * int32(int8(row[4+kk]))
			}
			return float64(qi.scale[i] * (s * float32(acc)))
		}, h.count
	}
	d, _, err := DecodeTokens(blob)
	if err != nil {
		t.Fatal(err)
	}
	q := k.q
	return func(i, j int) float64 {
		var s float64
		for kk := range dim {
			s += float64(q[i*dim+kk]) * float64(d[j*dim+kk])
		}
		return s
	}, h.count
}

// checkRows checks in float64 that each query token's row gives its
// maximum and that no row gives more, with products as dot gives them
// for n rows (TestExplainFirstAmongEquals checks ties).
func checkRows(t *testing.T, what string, dot func(i, j int) float64, n int, ex Explanation) {
	t.Helper()
	const tol = 1e-5
	for i, row := range ex.Row {
		if row < 0 || row >= n {
			t.Fatalf("%s: query token %d: row %d of %d", what, i, row, n)
		}
		if got := dot(i, row); math.Abs(got-float64(ex.Max[i])) > tol {
			t.Fatalf("%s: query token %d: row %d's product %v, max %v", what, i, row, got, ex.Max[i])
		}
		for j := range n {
			p := dot(i, j)
			if p > float64(ex.Max[i])+tol {
				t.Fatalf("%s: query token %d: row %d's product %v beside row %d's max %v", what, i, j, p, row, ex.Max[i])
			}
		}
	}
}

// TestExplainFirstAmongEquals: a query token equal to two document rows
// matches the first.
func TestExplainFirstAmongEquals(t *testing.T) {
	kernelConfigs(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 50))
		const dim = 16
		a, b := randomUnit(r, 1, dim), randomUnit(r, 1, dim)
		var doc []float32
		for range 5 {
			doc = append(append(doc, randomUnit(r, 1, dim)...), b...)
		}
		doc = append(append(doc, a...), a...) // rows 10 and 11
		blob, err := EncodeTokens(doc, dim, F32)
		if err != nil {
			t.Fatal(err)
		}
		ex := explain(t, append(append([]float32(nil), a...), b...), dim, blob, ScoreSumMax)
		if ex.Row[0] != 10 || ex.Row[1] != 1 {
			t.Errorf("rows %v, want [10 1]", ex.Row)
		}
	})
}

// TestExplainEqualsIndexScore: for every hit of an exhaustive search, and
// of a candidate search, of both index families, Explain over the stored
// blob gives exactly the hit's score.
func TestExplainEqualsIndexScore(t *testing.T) {
	ctx := context.Background()
	for _, desc := range []string{"", "Residual"} {
		for _, enc := range []Encoding{F16, I8} {
			// 64 values: the VNNI kernel's I8 path where the CPU has it
			// (an I8 blob of 40 such tokens fits the test store's values).
			for _, dim := range []int{16, 64} {
				if enc != I8 && dim > 16 {
					continue
				}
				t.Run(fmt.Sprintf("desc=%s/%s/dim=%d", desc, enc, dim), func(t *testing.T) {
					explainEqualsIndexScore(t, ctx, desc, enc, dim)
				})
			}
		}
	}
}

// explainEqualsIndexScore checks, for an index over blobs of one
// encoding, that each hit of each mode is explained, in its mode, to its
// score bit for bit; that Candidates and Exhaustive give a document the
// same score; and that Reference scores in float32 over the decoded rows
// (AvgMax, SumMax).
func explainEqualsIndexScore(t *testing.T, ctx context.Context, desc string, enc Encoding, dim int) {
	c := newSynth(300, dim, 9)
	st := openStore(t, "")
	c.write(t, st, enc)
	x := openIndex(t, st, &Options{Model: testModel, Dim: dim, Description: desc})
	r := rand.New(rand.NewPCG(11, 11))
	for qi := range 4 {
		q := randomUnit(r, 3+qi*11, dim)
		for _, s := range []Scoring{ScoreAvgMax, ScoreSumMax} {
			exact := map[uint64]float32{}
			for _, mode := range []Mode{Exhaustive, Candidates, Reference} {
				hits, err := x.Search(ctx, q, &SearchOptions{K: 20, Mode: mode, Scoring: s})
				if err != nil {
					t.Fatal(err)
				}
				if len(hits) == 0 {
					t.Fatal("no hits")
				}
				xp, err := NewExplainer(q, dim, s, mode)
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range hits {
					blob, ok, err := st.Blob(h.DocNum, BlobName(testModel))
					if err != nil || !ok {
						t.Fatalf("blob of %d: %v %v", h.DocNum, ok, err)
					}
					ex, err := xp.Explain(blob)
					if err != nil {
						t.Fatal(err)
					}
					if ex.Score != h.Score {
						t.Fatalf("query %d %s %s: document %d: explained %v, scored %v", qi, s, mode, h.DocNum, ex.Score, h.Score)
					}
					switch mode {
					case Exhaustive:
						exact[h.DocNum] = h.Score
					case Candidates:
						if e, ok := exact[h.DocNum]; ok && e != h.Score {
							t.Fatalf("query %d %s: document %d: candidate %v, exhaustive %v", qi, s, h.DocNum, h.Score, e)
						}
					case Reference:
						hd, _ := parseHeader(blob)
						rows := make([]float32, hd.count*dim)
						decodeRows(blob, hd, 0, hd.count, rows)
						score := AvgMax
						if s == ScoreSumMax {
							score = SumMax
						}
						want, err := score(q, rows, dim, nil, nil)
						if err != nil {
							t.Fatal(err)
						}
						if d := math.Abs(float64(want - h.Score)); d > 1e-5 {
							t.Fatalf("query %d %s: document %d: reference %v, float32 over the decoded rows %v", qi, s, h.DocNum, h.Score, want)
						}
					}
				}
			}
		}
	}
}

func TestExplainRejectsBadInput(t *testing.T) {
	blob, err := EncodeTokens(make([]float32, 16), 8, F32)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		q     []float32
		dim   int
		blob  []byte
		s     Scoring
		want  error
		wantS string
	}{
		{"scoring", make([]float32, 8), 8, blob, "max", ErrBadOptions, `"max"`},
		{"query length", make([]float32, 7), 8, blob, ScoreAvgMax, ErrBadVector, "7 values"},
		{"query value", append(make([]float32, 7), float32(math.NaN())), 8, blob, ScoreAvgMax, ErrBadVector, "NaN"},
		{"blob", make([]float32, 8), 8, blob[:10], ScoreAvgMax, ErrCorruption, "header says"},
		{"dimension", make([]float32, 16), 16, blob, ScoreAvgMax, ErrBadVector, "dimension 8"},
	} {
		x, err := NewExplainer(tc.q, tc.dim, tc.s, Candidates)
		if err == nil {
			_, err = x.Explain(tc.blob)
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantS) {
			t.Errorf("%s: %v, want %v naming %s", tc.name, err, tc.want, tc.wantS)
		}
	}
}

// BenchmarkExplain is the cost of explaining one hit: a query of 32 tokens
// against a SciFact-sized document (327 tokens of 384 values, F16), the
// shapes of bge-small-en-v1.5 (compare BenchmarkExactStage's cost per
// document scored).
func BenchmarkExplain(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const dim = 384
	q := randomUnit(r, 32, dim)
	blob, err := EncodeTokens(randomUnit(r, 327, dim), dim, F16)
	if err != nil {
		b.Fatal(err)
	}
	x, err := NewExplainer(q, dim, ScoreAvgMax, Candidates)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := x.Explain(blob); err != nil {
			b.Fatal(err)
		}
	}
}
