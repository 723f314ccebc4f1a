package latecollect

import (
	"math"
	"sync"
)

// Kernels of the residual-code index (see residual.go). Each has a portable
// Go version; on amd64 with AVX2 an assembly version may replace it, and
// the two must give bit-identical results (the operations are max, select
// and one add per value, so the order of operations does not matter).

// lutBlock is the number of query tokens (lanes) a block of the residual
// scoring tables holds; a query of more tokens takes several blocks.
const lutBlock = 32

// residualTables score one-bit residual codes against a query without
// decoding them, in 16-bit integers. A token with centroid c and code bits
// b scores against query token q
//
//	q·c + Σ_i q_i·lo_i + Σ_{i: b_i set} q_i·(hi_i − lo_i)
//
// The last sum is split over the code's nibbles (nibble position p covers
// dimensions 4p to 4p+3, bit k of the nibble dimension 4p+k): each
// position's 16 possible values are looked up, less their midpoint m_p. So
// the score is cent[c] + Σ_p nib[p][nibble p] (scaled integers) plus
// base[q] = Σ_i q_i·lo_i + Σ_p m_p, a constant per query token that is
// added after the maximum over a document's tokens.
//
// Each query token (lane) has its own scale, chosen so that no sum of one
// centroid score and one value per position can leave the 16-bit range
// with rounding included: the adds never wrap, and -32768 (noScore) is
// never a score. The rounding error of a token's score is at most
// (npos+1)/2 units, 49 units in 2^15 of the lane's range at 384-d.
type residualTables struct {
	nq, blocks, nlist, npos int
	// cent holds the scaled centroid scores, [block][centroid][lane].
	cent []int16
	// nib holds the scaled nibble values, [block][position][value][lane].
	nib []int16
	// pair, when not nil, holds the sums of each code byte's two nibble
	// values, [block][byte][value][lane] (withPairs).
	pair []int16
	// inv is 1/scale and base the constant, per lane.
	inv, base []float32
}

// pairTablePool recycles byte tables (768 KiB a block at 384 dimensions).
var pairTablePool sync.Pool

// withPairs builds t.pair over at most workers goroutines, where the
// byte-table kernel will run (AVX-512BW, a code of a multiple of 4
// bytes). A residual-code search scores some hundred thousand tokens:
// one 64-byte lookup per code byte instead of one per nibble halves the
// loads from the tables, which live in L2, and the scalar work that finds
// them, for a table 16 times larger (BenchmarkResidualScore). Release
// gives the tables back.
func (t *residualTables) withPairs(workers int) {
	if !useAVX512BW || t.npos%8 != 0 {
		return
	}
	nb := t.npos / 2
	size := t.blocks * nb * 256 * lutBlock
	var pair []int16
	if p, ok := pairTablePool.Get().(*[]int16); ok && cap(*p) >= size {
		pair = (*p)[:size]
	} else {
		pair = make([]int16, size)
	}
	inParts(nb, max(1, min(workers, nb/8)), func(_, from, to int) {
		for blk := range t.blocks {
			nib := t.nib[blk*t.npos*16*lutBlock : (blk+1)*t.npos*16*lutBlock]
			for b := from; b < to; b++ {
				lo := nib[(2*b)*16*lutBlock : (2*b+1)*16*lutBlock]
				hi := nib[(2*b+1)*16*lutBlock : (2*b+2)*16*lutBlock]
				dst := pair[(blk*nb+b)*256*lutBlock : (blk*nb+b+1)*256*lutBlock]
				if pairRows != nil {
					pairRows(&dst[0], &lo[0], &hi[0])
					continue
				}
				for h := range 16 {
					hrow := hi[h*lutBlock : (h+1)*lutBlock]
					for l := range 16 {
						lrow := lo[l*lutBlock : (l+1)*lutBlock]
						d := dst[(h*16+l)*lutBlock : (h*16+l+1)*lutBlock]
						for j := range d {
							d[j] = lrow[j] + hrow[j] // wraps, as the kernels' adds do
						}
					}
				}
			}
		}
	})
	t.pair = pair
}

// release returns the byte tables to the pool; t must not be used after.
func (t *residualTables) release() {
	if t.pair != nil {
		p := t.pair
		pairTablePool.Put(&p)
		t.pair = nil
	}
}

// pairRows, when not nil, fills one byte's table in withPairs (the
// assembly kernel where the CPU has AVX-512BW; tests set it to nil to
// compare with the Go loop).
var pairRows = func() func(dst, lo, hi *int16) {
	if useAVX512BW {
		return pairRowsAVX512
	}
	return nil
}()

// noScore is the 16-bit maximum of a document without tokens.
const noScore = math.MinInt16

// newResidualTables builds the tables for nq query tokens of dim values,
// given table, the query tokens' scores against the nlist centroids
// (table[c*stride+q]), and the residual reconstruction values lo and hi.
//
// The passes over the centroids run in at most workers goroutines. The
// centroid rows of the tables are filled for the centroids in only, or for
// all of them when only is nil: the list stage reads only the rows of the
// centroids it probed (at a million documents, filling all 32,768 rows
// for 32 query tokens was a tenth of a search's CPU). The scales come
// from every centroid's scores either way, so a row holds the same values
// whether the others are filled or not.
func newResidualTables(query []float32, nq, dim int, table []float32, stride, nlist int, lo, hi []float32, workers int, only []int32) *residualTables {
	npos := dim / 4
	blocks := (nq + lutBlock - 1) / lutBlock
	t := &residualTables{nq: nq, blocks: blocks, nlist: nlist, npos: npos,
		cent: make([]int16, blocks*nlist*lutBlock),
		nib:  make([]int16, blocks*npos*16*lutBlock),
		inv:  make([]float32, nq), base: make([]float32, nq)}
	// Centroid scores bound each lane's range with the nibble values.
	parts := max(1, min(workers, nlist/1024))
	partMax := make([][]float32, parts)
	inParts(nlist, parts, func(p, from, to int) {
		m := make([]float32, nq)
		for c := from; c < to; c++ {
			row := table[c*stride : c*stride+nq]
			for q, v := range row {
				if a := math.Float32frombits(math.Float32bits(v) &^ (1 << 31)); a > m[q] {
					m[q] = a
				}
			}
		}
		partMax[p] = m
	})
	cmax := make([]float64, nq)
	for _, m := range partMax {
		for q, v := range m {
			cmax[q] = max(cmax[q], float64(v))
		}
	}
	scale := make([]float32, nq)
	vals := make([]float64, npos*16)
	for q := range nq {
		tok := query[q*dim : (q+1)*dim]
		var base, bound float64
		for i, v := range tok {
			base += float64(v) * float64(lo[i])
		}
		for p := range npos {
			var w [4]float64
			for k := range 4 {
				i := 4*p + k
				w[k] = float64(tok[i]) * (float64(hi[i]) - float64(lo[i]))
			}
			row := vals[p*16 : (p+1)*16]
			lo, hi := 0.0, 0.0
			for v := range row {
				var s float64
				for k := range 4 {
					if v&(1<<k) != 0 {
						s += w[k]
					}
				}
				row[v] = s
				lo, hi = min(lo, s), max(hi, s)
			}
			mid := (lo + hi) / 2
			for v := range row {
				row[v] -= mid
			}
			base += mid
			bound += (hi - lo) / 2
		}
		sc := 1.0
		if r := cmax[q] + bound; r > 0 {
			sc = (math.MaxInt16 - float64(npos+1)) / r
		}
		scale[q] = float32(sc)
		t.inv[q], t.base[q] = float32(1/sc), float32(base)
		blk, lane := q/lutBlock, q%lutBlock
		nib := t.nib[blk*npos*16*lutBlock:]
		for i, v := range vals {
			nib[i*lutBlock+lane] = int16(math.Round(v * sc))
		}
	}
	rows := nlist
	if only != nil {
		rows = len(only)
		parts = max(1, min(workers, rows/1024))
	}
	inParts(rows, parts, func(_, from, to int) {
		for blk := range blocks {
			lanes := min(lutBlock, nq-blk*lutBlock)
			sc := scale[blk*lutBlock : blk*lutBlock+lanes]
			for i := from; i < to; i++ {
				c := i
				if only != nil {
					c = int(only[i])
				}
				src := table[c*stride+blk*lutBlock : c*stride+blk*lutBlock+lanes]
				dst := t.cent[(blk*nlist+c)*lutBlock : (blk*nlist+c)*lutBlock+lanes]
				for j, v := range src {
					// Rounded to nearest (halves up) without a branch:
					// the shifted value is positive, so truncation
					// floors it.
					dst[j] = int16(int32(float64(v)*float64(sc[j])+32768.5) - 32768)
				}
			}
		}
	})
	return t
}

// score sets best[:nq] to a document's scores per query token from the
// 16-bit maxima scratch[:blocks*lutBlock] (residualMax's): -Inf for a
// document without tokens. The product is rounded before the add, as the
// explicit conversion says (no fused multiply-add).
func (t *residualTables) score(best []float32, max16 []int16) {
	for q := range t.nq {
		if max16[q] == noScore {
			best[q] = float32(math.Inf(-1))
			continue
		}
		best[q] = float32(float32(max16[q])*t.inv[q]) + t.base[q]
	}
}

// residualMax sets best[j] to the maximum over the tokens t (centroid ids
// cids, one-bit codes of codeBytes bytes each in codes) of their scaled
// score for lane j, for every lane of every block; best must hold
// blocks*lutBlock values, filled with noScore for a new document. When
// keep is not nil only the tokens it lists count (indices into cids).
//
// On amd64 with AVX2 the assembly kernel residualMaxAVX2 does the work; on
// an id out of range it hands over to residualMaxGo, which panics on it
// (max is idempotent, so the part already done does not matter).
func (t *residualTables) residualMax(best []int16, cids []uint16, codes []byte, codeBytes int, keep []int32) {
	n := len(cids)
	if keep != nil {
		for _, i := range keep {
			if uint(i) >= uint(n) {
				panic("latecollect: residualMax: kept token index out of range")
			}
		}
		n = len(keep)
	}
	if useAVX2 && n > 0 && codeBytes > 0 && 2*codeBytes == t.npos && len(codes) >= len(cids)*codeBytes && len(best) >= t.blocks*lutBlock {
		var kp *int32
		if keep != nil {
			kp = &keep[0]
		}
		if t.pair != nil && codeBytes%4 == 0 {
			if residualPairAVX512(&best[0], &t.cent[0], t.nlist, &t.pair[0], t.blocks, &cids[0], &codes[0], kp, n, codeBytes) {
				return
			}
		} else if useAVX512BW && codeBytes%2 == 0 {
			if residualMaxAVX512(&best[0], &t.cent[0], t.nlist, &t.nib[0], t.blocks, &cids[0], &codes[0], kp, n, codeBytes) {
				return
			}
		} else if residualMaxAVX2(&best[0], &t.cent[0], t.nlist, &t.nib[0], t.blocks, &cids[0], &codes[0], kp, n, codeBytes) {
			return
		}
	}
	t.residualMaxGo(best, cids, codes, codeBytes, keep)
}

func (t *residualTables) residualMaxGo(best []int16, cids []uint16, codes []byte, codeBytes int, keep []int32) {
	n := len(cids)
	if keep != nil {
		n = len(keep)
	}
	var acc [lutBlock]int16
	for blk := range t.blocks {
		cent := t.cent[blk*t.nlist*lutBlock : (blk+1)*t.nlist*lutBlock]
		nib := t.nib[blk*t.npos*16*lutBlock : (blk+1)*t.npos*16*lutBlock]
		bb := best[blk*lutBlock : (blk+1)*lutBlock]
		for k := range n {
			i := k
			if keep != nil {
				i = int(keep[k])
			}
			c := cids[i]
			copy(acc[:], cent[int(c)*lutBlock:(int(c)+1)*lutBlock])
			for b, byt := range codes[i*codeBytes : (i+1)*codeBytes] {
				lo := nib[((2*b)*16+int(byt&15))*lutBlock:]
				hi := nib[((2*b+1)*16+int(byt>>4))*lutBlock:]
				for j := range acc {
					acc[j] += lo[j] + hi[j]
				}
			}
			for j, v := range acc {
				bb[j] = max(bb[j], v)
			}
		}
	}
}

// listMax scores the tokens of centroid c's code list (docnums docs,
// one-bit codes of codeBytes bytes each in codes) and raises, for each
// token whose document has a slot s = slots[docnum] ≥ 0, every lane of
// slab row s (blocks*lutBlock values, block by block) to the token's
// scaled score where that is higher. Every docnum must be below
// len(slots) and every slot below the slab's rows.
//
// With byte tables (withPairs) the assembly kernel listPairAVX512 does
// the work; on a docnum out of range it hands over to listMaxGo, which
// panics on it (max is idempotent). Without them, residualMax (with its
// AVX2 or AVX-512 kernels) scores each document's run of entries.
func (t *residualTables) listMax(slab []int16, c int, docs []uint32, slots []int32, codes []byte, codeBytes int) {
	n := len(docs)
	if n == 0 {
		return
	}
	if len(codes) < n*codeBytes || c < 0 || c >= t.nlist {
		panic("latecollect: listMax: codes or centroid out of range")
	}
	if t.pair != nil && codeBytes%4 == 0 && 2*codeBytes == t.npos && len(slots) > 0 {
		if listPairAVX512(&slab[0], &t.cent[c*lutBlock], t.nlist*lutBlock*2, &t.pair[0], t.blocks, &docs[0], &slots[0], len(slots), &codes[0], n, codeBytes) {
			return
		}
	}
	if useAVX2 {
		lanes := t.blocks * lutBlock
		var run [64]uint16
		for i := range run {
			run[i] = uint16(c)
		}
		for i := 0; i < n; {
			num := docs[i]
			j := i + 1
			for j < n && j-i < len(run) && docs[j] == num {
				j++
			}
			if s := slots[num]; s >= 0 {
				t.residualMax(slab[int(s)*lanes:int(s+1)*lanes], run[:j-i], codes[i*codeBytes:j*codeBytes], codeBytes, nil)
			}
			i = j
		}
		return
	}
	t.listMaxGo(slab, c, docs, slots, codes, codeBytes)
}

func (t *residualTables) listMaxGo(slab []int16, c int, docs []uint32, slots []int32, codes []byte, codeBytes int) {
	lanes := t.blocks * lutBlock
	var acc [lutBlock]int16
	for blk := range t.blocks {
		cent := t.cent[(blk*t.nlist+c)*lutBlock : (blk*t.nlist+c+1)*lutBlock]
		nib := t.nib[blk*t.npos*16*lutBlock : (blk+1)*t.npos*16*lutBlock]
		for i, num := range docs {
			s := slots[num]
			if s < 0 {
				continue
			}
			copy(acc[:], cent)
			for b, byt := range codes[i*codeBytes : (i+1)*codeBytes] {
				lo := nib[((2*b)*16+int(byt&15))*lutBlock:]
				hi := nib[((2*b+1)*16+int(byt>>4))*lutBlock:]
				for j := range acc {
					acc[j] += lo[j] + hi[j]
				}
			}
			row := slab[int(s)*lanes+blk*lutBlock : int(s)*lanes+(blk+1)*lutBlock]
			for j, v := range acc {
				row[j] = max(row[j], v)
			}
		}
	}
}

// inParts calls f(p, from, to) for parts equal shares [from, to) of
// [0, n), each in its own goroutine when there are several, and waits.
func inParts(n, parts int, f func(p, from, to int)) {
	if parts <= 1 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(p, n*p/parts, n*(p+1)/parts)
		}()
	}
	wg.Wait()
}
