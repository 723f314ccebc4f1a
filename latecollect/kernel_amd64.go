package latecollect

// dot4x2AVX2 sets out[i] to the inner product of q_i with d0 and out[4+i]
// to that with d1, over n values; n must be a positive multiple of 8. The
// pointers must address n readable values each. Implemented in
// kernel_amd64.s with AVX2 fused multiply-adds.
//
//go:noescape
func dot4x2AVX2(q0, q1, q2, q3, d0, d1 *float32, n int, out *[8]float32)

// decodeF16F16C converts n little-endian float16 values at src to float32
// at dst with the F16C instruction VCVTPH2PS; n must be a multiple of 8.
//
//go:noescape
func decodeF16F16C(dst *float32, src *byte, n int)

// encodeF16F16C converts n float32 values at src to little-endian
// float16 at dst with VCVTPS2PH, rounding to nearest even; n must be a
// multiple of 8.
//
//go:noescape
func encodeF16F16C(dst *byte, src *float32, n int)

// maxF32AVX2 returns the largest of n values at p, NaNs passed over (-Inf
// for none); n must be a positive multiple of 32. Implemented in
// kernel_amd64.s.
//
//go:noescape
func maxF32AVX2(p *float32, n int) float32

// rowsAbove8AVX2 is rowsAbove8 (residual_search.go) over rows > 0 rows of
// 8 values at p, stride values apart. Implemented in kernel_amd64.s.
//
//go:noescape
func rowsAbove8AVX2(p *float32, stride, rows int, thr *[8]float32, out *int32) int

// maxRows8AVX2 raises best[j] to the largest p[r*stride+j] over the n
// rows r listed at rows, for j < 8; the scores must not be NaN.
// Implemented in kernel_amd64.s.
//
//go:noescape
func maxRows8AVX2(p *float32, stride int, rows *uint16, n int, best *[8]float32)

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

func xgetbv() (eax uint32)

// haveAVX2 reports whether the CPU and the operating system support AVX2
// and FMA (CPUID leaf 1: FMA, OSXSAVE, AVX; XCR0: XMM and YMM state;
// leaf 7: AVX2).
func haveAVX2() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false
	}
	if xgetbv()&6 != 6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}

// haveF16C reports whether the CPU has F16C (CPUID leaf 1, ECX bit 29)
// with AVX state enabled by the operating system.
func haveF16C() bool {
	_, _, ecx1, _ := cpuid(1, 0)
	const f16c, osxsave, avx = 1 << 29, 1 << 27, 1 << 28
	return ecx1&(f16c|osxsave|avx) == f16c|osxsave|avx && xgetbv()&6 == 6
}

// haveAVX512 reports whether the CPU has AVX-512 Foundation (CPUID leaf
// 7, EBX bit 16) and the operating system saves the opmask and all 32
// 512-bit registers (XCR0 bits 5 to 7, with XMM and YMM state).
func haveAVX512() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 || !haveAVX2() {
		return false
	}
	if xgetbv()&0xe6 != 0xe6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<16) != 0
}

// haveAVX512BW reports haveAVX512 and AVX-512BW (CPUID leaf 7, EBX bit
// 30), the 16-bit lanes of the residual kernel.
func haveAVX512BW() bool {
	if !haveAVX512() {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<30) != 0
}

// haveVNNI reports haveAVX512BW with AVX-512VL and AVX512-VNNI (CPUID
// leaf 7, EBX bit 31 and ECX bit 11): VPDPBUSD on 512-bit registers.
func haveVNNI() bool {
	if !haveAVX512BW() {
		return false
	}
	_, ebx7, ecx7, _ := cpuid(7, 0)
	return ebx7&(1<<31) != 0 && ecx7&(1<<11) != 0
}

// useAVX2, useF16C and useAVX512 select the assembly kernels; tests and
// benchmarks turn them off to compare with the portable code.
var (
	useAVX2     = haveAVX2()
	useF16C     = haveF16C()
	useAVX512   = haveAVX512()
	useAVX512BW = haveAVX512BW()
	useVNNI     = haveVNNI()
)

// maxSimI8x32AVX2 is maxSimI8x32VNNI with AVX2 over rows rows (a positive
// even number), the query tokens as |q8| at qabs and q8 at qsgn, dim a
// multiple of 4; see kernel_amd64.s.
//
//go:noescape
func maxSimI8x32AVX2(qabs, qsgn, d *byte, stride, dim, rows int, best *float32)

// decodeI8AVX512 sets dst[i] = float32(int8(src[i])) * scale for n
// values, a positive multiple of 16; see kernel_amd64.s.
//
//go:noescape
func decodeI8AVX512(dst *float32, src *byte, scale float32, n int)

// maxSimI8x32VNNI raises best[l], l < 32, to the largest s_j * <q_l,
// d_j> over the 8 int8 rows d_j at d + j*stride bytes, dim values each
// (a multiple of 64), each preceded by its float32 scale s_j, for the
// query tokens laid out as queryI8.lanes; see kernel_amd64.s.
//
//go:noescape
func maxSimI8x32VNNI(qt, d *byte, stride, dim int, best *float32)

// maxSim8x32AVX512 raises best[l], l < 32, to the largest inner product of
// query token l with the 8 rows at d, d + stride, ... (floats), dim values
// each, the query tokens laid out k-major at qt (qt[k*32+l]); see
// kernel_amd64.s.
//
//go:noescape
func maxSim8x32AVX512(qt, d *float32, stride, dim int, best *float32)

// maxSim8x16AVX512 is maxSim8x32AVX512 for 16 query tokens (qt[k*16+l]).
//
//go:noescape
func maxSim8x16AVX512(qt, d *float32, stride, dim int, best *float32)

// dot8x32AVX512 sets out[j*ldo+l], j < 8, l < 32, to the inner product
// of query token l (laid out as for maxSim8x32AVX512) with row j at d +
// j*stride floats, dim values each, summed as maxSim8x32AVX512 sums it;
// see kernel_amd64.s.
//
//go:noescape
func dot8x32AVX512(qt, d *float32, stride, dim int, out *float32, ldo int)

// dot8x16AVX512 is dot8x32AVX512 for 16 query tokens (qt[k*16+l]).
//
//go:noescape
func dot8x16AVX512(qt, d *float32, stride, dim int, out *float32, ldo int)

// argmax8x32AVX512 raises best[l], l < 32, to the largest inner product
// of query token l (laid out as for maxSim8x32AVX512) with the n rows (a
// multiple of 8) of dim values at rows, taken in order, setting idx[l] to
// base plus that row's index when it does (strictly larger only: the
// lowest row among equals). See kernel_amd64.s.
//
//go:noescape
func argmax8x32AVX512(qt, rows *float32, n, dim int, best *float32, idx *int32, base int)

// residualMaxAVX2 is residualTables.residualMaxGo over n tokens (the
// first n, or the n whose indices keep lists when it is not nil), with
// the tables' slices as pointers: cent holds blocks tables of rows rows of
// 32 lanes, nib blocks tables of 2*codeBytes positions × 16 rows of 32
// lanes, best blocks × 32 lanes, codes codeBytes bytes per token. It
// returns false, leaving best partly updated, when an id is rows or more.
// Implemented in kernel_amd64.s.
//
//go:noescape
func residualMaxAVX2(best, cent *int16, rows int, nib *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) (ok bool)

// residualMaxAVX512 is residualMaxAVX2 with AVX-512BW, for an even
// codeBytes. Implemented in kernel_amd64.s.
//
//go:noescape
func residualMaxAVX512(best, cent *int16, rows int, nib *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) (ok bool)

// residualPairAVX512 is residualMaxAVX512 over byte tables: pair holds
// blocks × codeBytes tables of 256 rows of 32 lanes (pairTables), and
// codeBytes must be a multiple of 4. Implemented in kernel_amd64.s.
//
//go:noescape
func residualPairAVX512(best, cent *int16, rows int, pair *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) (ok bool)

// listPairAVX512 is listMaxGo over byte tables (see the assembly for
// its arguments). Implemented in kernel_amd64.s.
//
//go:noescape
func listPairAVX512(slab, cent *int16, centStride int, pair *int16, blocks int, docs *uint32, slots *int32, nslots int, codes *byte, n, codeBytes int) (ok bool)

// pairRowsAVX512 fills one byte's table of 256 rows of lutBlock lanes
// from its two nibbles' tables of 16 rows (residualTables.withPairs).
// Implemented in kernel_amd64.s.
//
//go:noescape
func pairRowsAVX512(dst, lo, hi *int16)

// argmaxI8x32VNNI raises best[l], l < 32, to scale[j] * float32(<q_l,
// row_j>) over the n int8 rows (a multiple of 8) at rows, dim values each
// (a multiple of 4), setting idx[l] to base + j for the row that raised it
// last (so the lowest among equals), for the tokens laid out as
// queryI8.lanes; corr[j] is 128 * Σ row_j[k]. See kernel_amd64.s.
//
//go:noescape
func argmaxI8x32VNNI(qt, rows *byte, n, dim int, corr *int32, scale *float32, best *float32, idx *int32, base int)

// dotI8x32VNNI sets out[j*stride+l], l < min(stride, 32) (a stride of 16,
// or of at least 32), to
// float32(<q_l, row_j>) * scale[j] * qscale[l] for the n int8 rows (a
// multiple of 8) at rows, dim values each (a multiple of 4), and the 32
// tokens laid out as queryI8.lanes; corr[j] is 128 * Σ row_j[k]. See
// kernel_amd64.s.
//
//go:noescape
func dotI8x32VNNI(qt, rows *byte, n, dim int, corr *int32, scale, qscale, out *float32, stride int)

// topKAVX512 is topGroups's floor, filter and selection with AVX-512 for
// n values (a multiple of 16, n/k a multiple of 16), with scratch cv and
// ci of 80 entries each; it returns k, or 0 when more than 64 values
// reach the floor (out untouched); see kernel_amd64.s.
//
//go:noescape
func topKAVX512(row *float32, n, k int, out *int32, cv *float32, ci *int32) int
