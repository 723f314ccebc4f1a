package latecollect

// Kernels of the residual-code index (see residual.go). Each has a portable
// Go version; on amd64 with AVX2 an assembly version may replace it, and
// the two must give bit-identical results (the operations are max, select
// and one add per value, so the order of operations does not matter).

// centroidMax sets best[j] = max(best[j], table[c*stride+j]) for every
// centroid id c in cids and every j < stride. table holds one row of
// stride values per centroid (the query tokens' scores against it);
// stride is a positive multiple of 8 and len(best) ≥ stride.
//
// On amd64 with AVX2 the assembly kernel centroidMaxAVX2 does the work; it
// checks every id against the table's rows and, on one out of range,
// hands over to centroidMaxGo, which panics on it (max is idempotent, so
// the part already done does not matter).
func centroidMax(best, table []float32, stride int, cids []uint16) {
	if useAVX2 && stride > 0 && stride%8 == 0 && len(best) >= stride && len(table) >= stride && len(cids) > 0 {
		if centroidMaxAVX2(&best[0], &table[0], stride, len(table)/stride, &cids[0], len(cids)) {
			return
		}
	}
	centroidMaxGo(best, table, stride, cids)
}

func centroidMaxGo(best, table []float32, stride int, cids []uint16) {
	best = best[:stride]
	for _, c := range cids {
		row := table[int(c)*stride : int(c)*stride+stride]
		for j, v := range row {
			if v > best[j] {
				best[j] = v
			}
		}
	}
}

// lutBlock is the number of query tokens (lanes) a residual lookup table
// block holds; see residualTable.
const lutBlock = 32

// residualTable builds the lookup tables that score one-bit residual codes
// against the query without decoding them. A token with centroid c and
// code bits b scores against query token q
//
//	q·c + Σ_i q_i·lo_i + Σ_{i: b_i set} q_i·(hi_i − lo_i)
//
// The first term is the centroid score table's row c, the second a
// constant per query token (base[q]), and the third a sum over the code's
// nibbles of a value looked up per nibble: lut holds, for each block of
// lutBlock query tokens, each nibble position p (dimensions 4p to 4p+3,
// bit k of the nibble for dimension 4p+k) and each of its 16 values v,
// lutBlock sums, at lut[((blk*npos+p)*16+v)*lutBlock+lane]. stride is the
// query tokens rounded up to a multiple of lutBlock; lanes past nq are 0.
func residualTable(query []float32, nq, dim, stride int, lo, hi []float32, lut, base []float32) {
	npos := dim / 4
	clear(lut[:stride*npos*16])
	clear(base[:stride])
	for q := range nq {
		tok := query[q*dim : (q+1)*dim]
		var b float32
		for i, v := range tok {
			b += v * lo[i]
		}
		base[q] = b
		blk, lane := q/lutBlock, q%lutBlock
		for p := range npos {
			var w [4]float32
			for k := range 4 {
				i := 4*p + k
				w[k] = tok[i] * (hi[i] - lo[i])
			}
			row := lut[(blk*npos+p)*16*lutBlock:]
			for v := 1; v < 16; v++ {
				var s float32
				for k := range 4 {
					if v&(1<<k) != 0 {
						s += w[k]
					}
				}
				row[v*lutBlock+lane] = s
			}
		}
	}
}

// residualMax sets best[j] = max(best[j], score of token t for lane j) over
// the tokens t with centroid ids cids and one-bit codes codes (codeBytes
// each), where a token's score is table[c*stride+j] plus its nibbles'
// values in lut, added in nibble order (see residualTable; base is not
// added). stride is a positive multiple of lutBlock and len(best) ≥
// stride.
//
// On amd64 with AVX2 the assembly kernel residualMaxAVX2 does the work; on
// an id out of the table's range it hands over to residualMaxGo, which
// panics on it (the part already done is idempotent).
func residualMax(best, table []float32, stride int, lut []float32, cids []uint16, codes []byte, codeBytes int) {
	n := len(cids)
	npos := 2 * codeBytes
	if useAVX2 && stride > 0 && stride%lutBlock == 0 && len(best) >= stride && len(table) >= stride &&
		n > 0 && codeBytes > 0 && len(codes) >= n*codeBytes && len(lut) >= stride*npos*16 {
		if residualMaxAVX2(&best[0], &table[0], stride, len(table)/stride, &lut[0], &cids[0], &codes[0], n, codeBytes) {
			return
		}
	}
	residualMaxGo(best, table, stride, lut, cids, codes, codeBytes)
}

func residualMaxGo(best, table []float32, stride int, lut []float32, cids []uint16, codes []byte, codeBytes int) {
	npos := 2 * codeBytes
	var acc [lutBlock]float32
	for blk := range stride / lutBlock {
		lanes := lut[blk*npos*16*lutBlock : (blk+1)*npos*16*lutBlock]
		bb := best[blk*lutBlock : (blk+1)*lutBlock]
		for t, c := range cids {
			copy(acc[:], table[int(c)*stride+blk*lutBlock:int(c)*stride+(blk+1)*lutBlock])
			for b, byt := range codes[t*codeBytes : (t+1)*codeBytes] {
				lo := lanes[((2*b)*16+int(byt&15))*lutBlock:]
				hi := lanes[((2*b+1)*16+int(byt>>4))*lutBlock:]
				for j := range acc {
					acc[j] += lo[j]
				}
				for j := range acc {
					acc[j] += hi[j]
				}
			}
			for j, v := range acc {
				if v > bb[j] {
					bb[j] = v
				}
			}
		}
	}
}
