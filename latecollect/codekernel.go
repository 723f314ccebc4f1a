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

// decodeResidual1 reconstructs one token from its centroid and its one-bit
// residual code: for dimension i = 8*b + k, bit k (least significant
// first) of code[b] selects hi[i] when set and lo[i] otherwise, and
// dst[i] = centroid[i] + that value. len(dst) is the dimension, a positive
// multiple of 8; centroid, lo and hi have that length and code has
// len(dst)/8 bytes.
//
// On amd64 with AVX2 the assembly kernel decodeResidual1AVX2 does the work
// when the lengths fit.
func decodeResidual1(dst, centroid, lo, hi []float32, code []byte) {
	if n := len(dst); useAVX2 && n > 0 && n%8 == 0 && len(centroid) >= n && len(lo) >= n && len(hi) >= n && len(code) >= n/8 {
		decodeResidual1AVX2(&dst[0], &centroid[0], &lo[0], &hi[0], &code[0], n)
		return
	}
	decodeResidual1Go(dst, centroid, lo, hi, code)
}

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
