package latecollect

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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

// randomTables makes residual scoring tables of random 16-bit values (the
// kernels' adds wrap alike, so any values compare).
func randomTables(r *rand.Rand, nq, nlist, codeBytes int) *residualTables {
	blocks, npos := (nq+lutBlock-1)/lutBlock, 2*codeBytes
	t := &residualTables{nq: nq, blocks: blocks, nlist: nlist, npos: npos,
		cent: make([]int16, blocks*nlist*lutBlock), nib: make([]int16, blocks*npos*16*lutBlock)}
	for i := range t.cent {
		t.cent[i] = int16(r.Uint32())
	}
	for i := range t.nib {
		t.nib[i] = int16(r.Uint32())
	}
	return t
}

// The assembly residualMax gives the Go version's bits for any codes,
// queries of one to three lane blocks and documents of any length.
func TestResidualMaxAVX2MatchesGo(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2 on this machine: the portable kernel is the only one")
	}
	r := rand.New(rand.NewPCG(5, 8))
	const rows = 50
	for _, nq := range []int{1, 32, 33, 96} {
		for _, codeBytes := range []int{1, 2, 6, 48} {
			tb := randomTables(r, nq, rows, codeBytes)
			// From 4 code bytes on, residualMax goes through the byte
			// tables where the CPU has AVX-512BW.
			tb.withPairs(2)
			if useAVX512BW && codeBytes%4 == 0 && tb.pair == nil {
				t.Fatalf("nq=%d codeBytes=%d: no byte tables on a CPU with AVX-512BW", nq, codeBytes)
			}
			for _, n := range []int{1, 2, 7, 300} {
				cids := make([]uint16, n)
				for i := range cids {
					cids[i] = uint16(r.IntN(rows))
				}
				codes := make([]byte, n*codeBytes)
				for i := range codes {
					codes[i] = byte(r.Uint32())
				}
				want := make([]int16, tb.blocks*lutBlock+3)
				for i := range want {
					want[i] = int16(r.Uint32())
				}
				init := slices.Clone(want)
				got, direct := slices.Clone(want), slices.Clone(want)
				tb.residualMaxGo(want, cids, codes, codeBytes, nil)
				tb.residualMax(got, cids, codes, codeBytes, nil)
				if !slices.Equal(got, want) {
					t.Fatalf("nq=%d codeBytes=%d n=%d: residualMax differs from the Go version", nq, codeBytes, n)
				}
				if !residualMaxAVX2(&direct[0], &tb.cent[0], rows, &tb.nib[0], tb.blocks, &cids[0], &codes[0], nil, n, codeBytes) {
					t.Fatalf("nq=%d codeBytes=%d n=%d: residualMaxAVX2 refused ids below %d", nq, codeBytes, n, rows)
				}
				if !slices.Equal(direct, want) {
					t.Fatalf("nq=%d codeBytes=%d n=%d: residualMaxAVX2 differs from the Go version", nq, codeBytes, n)
				}
				if useAVX512BW && codeBytes%2 == 0 {
					z := slices.Clone(init)
					if !residualMaxAVX512(&z[0], &tb.cent[0], rows, &tb.nib[0], tb.blocks, &cids[0], &codes[0], nil, n, codeBytes) {
						t.Fatalf("nq=%d codeBytes=%d n=%d: residualMaxAVX512 refused ids below %d", nq, codeBytes, n, rows)
					}
					if !slices.Equal(z, want) {
						t.Fatalf("nq=%d codeBytes=%d n=%d: residualMaxAVX512 differs from the Go version", nq, codeBytes, n)
					}
				}

				if tb.pair != nil {
					z := slices.Clone(init)
					if !residualPairAVX512(&z[0], &tb.cent[0], rows, &tb.pair[0], tb.blocks, &cids[0], &codes[0], nil, n, codeBytes) {
						t.Fatalf("nq=%d codeBytes=%d n=%d: residualPairAVX512 refused ids below %d", nq, codeBytes, n, rows)
					}
					if !slices.Equal(z, want) {
						t.Fatalf("nq=%d codeBytes=%d n=%d: residualPairAVX512 differs from the Go version", nq, codeBytes, n)
					}
				}

				// A list of kept tokens scores as those tokens copied out.
				var keep []int32
				var kc []uint16
				var kcodes []byte
				for i := range n {
					if r.IntN(3) == 0 {
						keep = append(keep, int32(i))
						kc = append(kc, cids[i])
						kcodes = append(kcodes, codes[i*codeBytes:(i+1)*codeBytes]...)
					}
				}
				if len(keep) == 0 {
					continue
				}
				want, got, goKeep := slices.Clone(init), slices.Clone(init), slices.Clone(init)
				tb.residualMaxGo(want, kc, kcodes, codeBytes, nil)
				tb.residualMaxGo(goKeep, cids, codes, codeBytes, keep)
				tb.residualMax(got, cids, codes, codeBytes, keep)
				if !slices.Equal(goKeep, want) || !slices.Equal(got, want) {
					t.Fatalf("nq=%d codeBytes=%d n=%d: kept tokens score otherwise than copied out", nq, codeBytes, n)
				}
			}
			tb.release()
		}
	}
}

// An id beyond the tables stops the assembly residualMax and makes
// residualMax panic as the Go version does.
func TestResidualMaxOutOfRange(t *testing.T) {
	const rows, codeBytes = 10, 2
	tb := randomTables(rand.New(rand.NewPCG(1, 1)), 5, rows, codeBytes)
	best := make([]int16, lutBlock)
	cids := []uint16{1, rows, 3}
	codes := make([]byte, len(cids)*codeBytes)
	if useAVX2 && residualMaxAVX2(&best[0], &tb.cent[0], rows, &tb.nib[0], tb.blocks, &cids[0], &codes[0], nil, len(cids), codeBytes) {
		t.Errorf("residualMaxAVX2 accepted id %d of a %d-row table", rows, rows)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("residualMax did not panic on id %d of a %d-row table", rows, rows)
		}
	}()
	tb.residualMax(best, cids, codes, codeBytes, nil)
}

// A kept index beyond the tokens makes residualMax panic before any
// kernel reads past the codes.
func TestResidualMaxKeepOutOfRange(t *testing.T) {
	const rows, codeBytes = 10, 2
	tb := randomTables(rand.New(rand.NewPCG(1, 2)), 5, rows, codeBytes)
	best := make([]int16, lutBlock)
	cids := []uint16{1, 2, 3}
	codes := make([]byte, len(cids)*codeBytes)
	defer func() {
		if recover() == nil {
			t.Error("residualMax did not panic on kept index 3 of 3 tokens")
		}
	}()
	tb.residualMax(best, cids, codes, codeBytes, []int32{0, 3})
}

// randomCodebook draws rows centroids of dim values, reconstruction values
// lo < 0 < hi per dimension, and n tokens' centroid ids and one-bit codes.
func randomCodebook(r *rand.Rand, rows, dim, n int) (cent, lo, hi []float32, cids []uint16, codes []byte) {
	cent = make([]float32, rows*dim)
	for i := range cent {
		cent[i] = float32(r.NormFloat64())
	}
	lo, hi = make([]float32, dim), make([]float32, dim)
	for i := range dim {
		lo[i], hi[i] = -float32(r.Float64()), float32(r.Float64())
	}
	cids = make([]uint16, n)
	for i := range cids {
		cids[i] = uint16(r.IntN(rows))
	}
	codes = make([]byte, n*dim/8)
	for i := range codes {
		codes[i] = byte(r.Uint32())
	}
	return cent, lo, hi, cids, codes
}

// decodeResidual1Go reconstructs one token from its centroid and its
// one-bit residual code: for dimension i = 8*b + k, bit k (least
// significant first) of code[b] selects hi[i] when set and lo[i]
// otherwise, and dst[i] = centroid[i] + that value. The reference the
// lookup tables are tested against.
func decodeResidual1Go(dst, centroid, lo, hi []float32, code []byte) {
	n := len(dst)
	centroid, lo, hi, code = centroid[:n], lo[:n], hi[:n], code[:n/8]
	for b, byt := range code {
		for k := range 8 {
			i := 8*b + k
			r := lo[i]
			if byt&(1<<k) != 0 {
				r = hi[i]
			}
			dst[i] = centroid[i] + r
		}
	}
}

// Scoring codes through the lookup tables gives what decoding the tokens
// and taking inner products gives, up to float32 rounding, for queries of
// up to three lane blocks, with either kernel.
func TestResidualTableScoresDecodedTokens(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	const dim, rows, n = 48, 20, 40
	cent, lo, hi, cids, codes := randomCodebook(r, rows, dim, n)
	decoded := make([]float32, n*dim)
	for i, c := range cids {
		decodeResidual1Go(decoded[i*dim:(i+1)*dim], cent[int(c)*dim:(int(c)+1)*dim], lo, hi, codes[i*dim/8:(i+1)*dim/8])
	}
	saved := useAVX2
	defer func() { useAVX2 = saved }()
	for _, asm := range []bool{false, saved} {
		useAVX2 = asm
		for _, nq := range []int{1, 5, 32, 33, 70} {
			query := make([]float32, nq*dim)
			for i := range query {
				query[i] = float32(r.NormFloat64())
			}
			stride := (nq + 7) &^ 7
			table := make([]float32, rows*stride)
			for c := range rows {
				for q := range nq {
					table[c*stride+q] = dot(query[q*dim:(q+1)*dim], cent[c*dim:(c+1)*dim])
				}
			}
			tb := newResidualTables(query, nq, dim, table, stride, rows, lo, hi, 2, nil)
			// Tables for some centroids only hold the same values for them.
			var only []int32
			for c := 0; c < rows; c += 3 {
				only = append(only, int32(c))
			}
			part := newResidualTables(query, nq, dim, table, stride, rows, lo, hi, 2, only)
			if !slices.Equal(part.nib, tb.nib) || !slices.Equal(part.inv, tb.inv) || !slices.Equal(part.base, tb.base) {
				t.Fatalf("nq=%d: tables for some centroids: other nibble tables or scales", nq)
			}
			for _, c := range only {
				for blk := range tb.blocks {
					at := (blk*rows + int(c)) * lutBlock
					if !slices.Equal(part.cent[at:at+lutBlock], tb.cent[at:at+lutBlock]) {
						t.Fatalf("nq=%d: centroid %d: row %v in tables for some centroids, %v for all", nq, c, part.cent[at:at+lutBlock], tb.cent[at:at+lutBlock])
					}
				}
			}
			max16 := make([]int16, tb.blocks*lutBlock)
			for j := range max16 {
				max16[j] = noScore
			}
			tb.residualMax(max16, cids, codes, dim/8, nil)
			best := make([]float32, nq)
			tb.score(best, max16)
			for q := range nq {
				want := float32(math.Inf(-1))
				for i := range n {
					want = max(want, dot(query[q*dim:(q+1)*dim], decoded[i*dim:(i+1)*dim]))
				}
				// Rounding: half a unit per looked-up value, plus float32's.
				bound := float64(dim/4+1)/2*float64(tb.inv[q]) + 1e-5*(1+math.Abs(float64(want)))
				if got := best[q]; math.Abs(float64(got-want)) > bound {
					t.Fatalf("avx2=%v nq=%d: query token %d scores %v from the tables, %v decoded (bound %g)", asm, nq, q, got, want, bound)
				}
			}
			empty := make([]int16, tb.blocks*lutBlock)
			for j := range empty {
				empty[j] = noScore
			}
			tb.score(best, empty)
			if !math.IsInf(float64(best[0]), -1) {
				t.Fatalf("a document without tokens scores %v, want -Inf", best[0])
			}
		}
	}
}

// codeKernelModes runs f as sub-benchmark "go" with the portable kernels
// and, where the CPU has them, "avx2" with the AVX2 assembly ones and
// "avx512" with the AVX-512BW residual kernel.
func codeKernelModes(b *testing.B, f func(b *testing.B)) {
	saved, savedBW := useAVX2, useAVX512BW
	defer func() { useAVX2, useAVX512BW = saved, savedBW }()
	type mode struct {
		name     string
		avx2, bw bool
	}
	modes := []mode{{name: "go"}}
	if saved {
		modes = append(modes, mode{"avx2", true, false})
	}
	if savedBW {
		modes = append(modes, mode{"avx512", true, true})
	}
	for _, m := range modes {
		useAVX2, useAVX512BW = m.avx2, m.bw
		b.Run(m.name, f)
	}
}

// BenchmarkResidualScore measures scoring one document of 327 384-d tokens
// from one-bit codes against a 32-token query through the lookup tables
// (stage 4 of residual search). Decoding the tokens and taking inner
// products instead took 443 ns/token with AVX2, against 115 for the
// tables. ns/token is per document token.
// benchTables is the residual benchmarks' set-up: one document of 327
// 384-d tokens coded against 4,096 centroids, and the tables of a random
// 32-token query.
func benchTables() (tb *residualTables, cids []uint16, codes []byte) {
	const dim, rows, tokens, nq = 384, 4096, 327, 32
	r := rand.New(rand.NewPCG(3, 4))
	_, lo, hi, cids, codes := randomCodebook(r, rows, dim, tokens)
	query := make([]float32, nq*dim)
	for i := range query {
		query[i] = float32(r.NormFloat64())
	}
	table := make([]float32, rows*nq)
	for i := range table {
		table[i] = float32(r.NormFloat64())
	}
	return newResidualTables(query, nq, dim, table, nq, rows, lo, hi, 1, nil), cids, codes
}

func BenchmarkResidualScore(b *testing.B) {
	const dim, tokens, nq = 384, 327, 32
	tb, cids, codes := benchTables()
	best := make([]int16, nq)
	codeKernelModes(b, func(b *testing.B) {
		for b.Loop() {
			for j := range best {
				best[j] = noScore
			}
			tb.residualMax(best, cids, codes, dim/8, nil)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tokens, "ns/token")
	})
	if tb.withPairs(1); tb.pair != nil {
		b.Run("avx512-pairs", func(b *testing.B) {
			for b.Loop() {
				for j := range best {
					best[j] = noScore
				}
				tb.residualMax(best, cids, codes, dim/8, nil)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tokens, "ns/token")
		})
		tb.release()
	}
}

// BenchmarkPairTables measures building one query's byte tables (32
// query tokens, 384-d codes) on one goroutine and on two.
func BenchmarkPairTables(b *testing.B) {
	if !useAVX512BW {
		b.Skip("no AVX-512BW: the byte tables are not used")
	}
	tb, _, _ := benchTables()
	for _, w := range []int{1, 2} {
		b.Run(fmt.Sprint(w), func(b *testing.B) {
			for b.Loop() {
				tb.withPairs(w)
				tb.release()
			}
		})
	}
}

// BenchmarkResidualTables measures building one query's 16-bit tables:
// 32 query tokens against 16,384 centroids at 128-d (100,000 synthetic
// documents' index), on one goroutine.
func BenchmarkResidualTables(b *testing.B) {
	const dim, nlist, nq = 128, 16384, 32
	r := rand.New(rand.NewPCG(5, 5))
	_, lo, hi, _, _ := randomCodebook(r, 1, dim, 0)
	query := randomUnit(r, nq, dim)
	table := make([]float32, nlist*nq)
	for i := range table {
		table[i] = float32(r.NormFloat64() * 0.3)
	}
	for b.Loop() {
		newResidualTables(query, nq, dim, table, nq, nlist, lo, hi, 1, nil)
	}
}

// BenchmarkResidualKept measures the residual stage on the 36% of a
// document's tokens that pruning keeps (SciFact's share): the kept tokens
// copied out first, as the search did, and passed as a list of indices,
// as it does now.
func BenchmarkResidualKept(b *testing.B) {
	const dim, tokens, nq = 384, 327, 32
	tb, cids, codes := benchTables()
	r := rand.New(rand.NewPCG(3, 5))
	var keep []int32
	for i := range tokens {
		if r.Float64() < 0.36 {
			keep = append(keep, int32(i))
		}
	}
	best := make([]int16, nq)
	cb := dim / 8
	b.Run("copied", func(b *testing.B) {
		var kc []uint16
		var kcodes []byte
		for b.Loop() {
			kc, kcodes = kc[:0], kcodes[:0]
			for _, t := range keep {
				kc = append(kc, cids[t])
				kcodes = append(kcodes, codes[int(t)*cb:int(t+1)*cb]...)
			}
			for j := range best {
				best[j] = noScore
			}
			tb.residualMax(best, kc, kcodes, cb, nil)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(keep)), "ns/token")
	})
	b.Run("listed", func(b *testing.B) {
		for b.Loop() {
			for j := range best {
				best[j] = noScore
			}
			tb.residualMax(best, cids, codes, cb, keep)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(keep)), "ns/token")
	})
}

// listMax, whichever kernel runs it, raises each slotted document's row
// to what residualMaxGo gives over that document's tokens of the list,
// and leaves the rows of unslotted documents as they were.
func TestListMaxMatchesResidualMax(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 9))
	const rows = 40
	for _, nq := range []int{1, 32, 33, 96} {
		for _, codeBytes := range []int{4, 48} {
			tb := randomTables(r, nq, rows, codeBytes)
			tb.withPairs(2)
			lanes := tb.blocks * lutBlock
			for _, n := range []int{1, 5, 200} {
				const ndocs = 30
				c := r.IntN(rows)
				docs := make([]uint32, n)
				for i := range docs {
					docs[i] = uint32(r.IntN(ndocs))
				}
				slices.Sort(docs) // a document's entries are contiguous
				codes := make([]byte, n*codeBytes)
				for i := range codes {
					codes[i] = byte(r.Uint32())
				}
				slots := make([]int32, ndocs)
				nslots := 0
				for d := range slots {
					slots[d] = -1
					if r.IntN(4) != 0 {
						slots[d] = int32(nslots)
						nslots++
					}
				}
				init := make([]int16, nslots*lanes)
				for i := range init {
					init[i] = int16(r.Uint32())
				}
				want := slices.Clone(init)
				for d := range ndocs {
					s := slots[d]
					if s < 0 {
						continue
					}
					var cids []uint16
					var dc []byte
					for i, num := range docs {
						if int(num) == d {
							cids = append(cids, uint16(c))
							dc = append(dc, codes[i*codeBytes:(i+1)*codeBytes]...)
						}
					}
					if len(cids) > 0 {
						tb.residualMaxGo(want[int(s)*lanes:int(s+1)*lanes], cids, dc, codeBytes, nil)
					}
				}
				got, gogot := slices.Clone(init), slices.Clone(init)
				tb.listMax(got, c, docs, slots, codes, codeBytes)
				tb.listMaxGo(gogot, c, docs, slots, codes, codeBytes)
				if !slices.Equal(gogot, want) {
					t.Fatalf("nq=%d codeBytes=%d n=%d: listMaxGo differs from residualMaxGo", nq, codeBytes, n)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("nq=%d codeBytes=%d n=%d (byte tables %v): listMax differs from residualMaxGo", nq, codeBytes, n, tb.pair != nil)
				}
			}
			tb.release()
		}
	}
}

// withPairs builds the same byte tables with the assembly kernel as with
// the Go loop.
func TestPairRowsMatchGo(t *testing.T) {
	if !useAVX512BW {
		t.Skip("no AVX-512BW on this machine: no byte tables")
	}
	r := rand.New(rand.NewPCG(7, 7))
	for _, nq := range []int{1, 33} {
		tb := randomTables(r, nq, 10, 8)
		tb.withPairs(2)
		got := slices.Clone(tb.pair)
		tb.release()
		saved := pairRows
		pairRows = nil
		tb.withPairs(2)
		pairRows = saved
		if !slices.Equal(got, tb.pair) {
			t.Fatalf("nq=%d: byte tables differ between the kernel and the Go loop", nq)
		}
		tb.release()
	}
}
