//go:build !amd64

package latecollect

var (
	useAVX2     = false
	useF16C     = false
	useAVX512   = false
	useAVX512BW = false
	useVNNI     = false
)

func maxSimI8x32AVX2(qabs, qsgn, d *byte, stride, dim, rows int, best *float32) {
	panic("latecollect: maxSimI8x32AVX2 without amd64")
}

func decodeI8AVX512(dst *float32, src *byte, scale float32, n int) {
	panic("latecollect: decodeI8AVX512 without amd64")
}

func maxSimI8x32VNNI(qt, d *byte, stride, dim int, best *float32) {
	panic("latecollect: maxSimI8x32VNNI without amd64")
}

func dot4x2AVX2(q0, q1, q2, q3, d0, d1 *float32, n int, out *[8]float32) {
	panic("latecollect: dot4x2AVX2 without amd64")
}

func decodeF16F16C(dst *float32, src *byte, n int) {
	panic("latecollect: decodeF16F16C without amd64")
}

func residualMaxAVX2(best, cent *int16, rows int, nib *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) bool {
	panic("latecollect: residualMaxAVX2 without amd64")
}

func maxF32AVX2(p *float32, n int) float32 {
	panic("latecollect: maxF32AVX2 without amd64")
}

func encodeF16F16C(dst *byte, src *float32, n int) {
	panic("latecollect: encodeF16F16C without amd64")
}

func maxSim8x32AVX512(qt, d *float32, stride, dim int, best *float32) {
	panic("latecollect: maxSim8x32AVX512 without amd64")
}

func maxSim8x16AVX512(qt, d *float32, stride, dim int, best *float32) {
	panic("latecollect: maxSim8x16AVX512 without amd64")
}

func residualMaxAVX512(best, cent *int16, rows int, nib *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) bool {
	panic("latecollect: residualMaxAVX512 without amd64")
}

func dot8x32AVX512(qt, d *float32, stride, dim int, out *float32, ldo int) {
	panic("latecollect: dot8x32AVX512 without amd64")
}

func dot8x16AVX512(qt, d *float32, stride, dim int, out *float32, ldo int) {
	panic("latecollect: dot8x16AVX512 without amd64")
}

func residualPairAVX512(best, cent *int16, rows int, pair *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) bool {
	panic("latecollect: residualPairAVX512 without amd64")
}

func argmax8x32AVX512(qt, rows *float32, n, dim int, best *float32, idx *int32, base int) {
	panic("latecollect: argmax8x32AVX512 without amd64")
}

func listPairAVX512(slab, cent *int16, centStride int, pair *int16, blocks int, docs *uint32, slots *int32, nslots int, codes *byte, n, codeBytes int) bool {
	panic("latecollect: no assembly on this architecture")
}

func pairRowsAVX512(dst, lo, hi *int16) {
	panic("latecollect: no assembly on this architecture")
}

func argmaxI8x32VNNI(qt, rows *byte, n, dim int, corr *int32, scale *float32, best *float32, idx *int32, base int) {
	panic("latecollect: argmaxI8x32VNNI without amd64")
}

func dotI8x32VNNI(qt, rows *byte, n, dim int, corr *int32, scale, qscale, out *float32, stride int) {
	panic("latecollect: dotI8x32VNNI without amd64")
}

func topKAVX512(row *float32, n, k int, out *int32, cv *float32, ci *int32) int {
	panic("latecollect: topKAVX512 without amd64")
}

func rowsAbove8AVX2(p *float32, stride, rows int, thr *[8]float32, out *int32) int {
	panic("latecollect: rowsAbove8AVX2 without amd64")
}

func maxRows8AVX2(p *float32, stride int, rows *uint16, n int, best *[8]float32) {
	panic("latecollect: maxRows8AVX2 without amd64")
}
