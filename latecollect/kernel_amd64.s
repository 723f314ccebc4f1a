#include "textflag.h"

// func dot4x2AVX2(q0, q1, q2, q3, d0, d1 *float32, n int, out *[8]float32)
//
// out[i] = <q_i, d0> and out[4+i] = <q_i, d1> over n values, n a positive
// multiple of 8. Each product is summed in 8 lanes (one fused multiply-add
// per lane and step), then the lanes are added pairwise in a fixed order,
// so a product's value depends only on its two vectors.
TEXT ·dot4x2AVX2(SB), NOSPLIT, $0-64
	MOVQ q0+0(FP), SI
	MOVQ q1+8(FP), R8
	MOVQ q2+16(FP), R9
	MOVQ q3+24(FP), R10
	MOVQ d0+32(FP), DI
	MOVQ d1+40(FP), R11
	MOVQ n+48(FP), CX
	MOVQ out+56(FP), DX
	SHLQ $2, CX
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop:
	VMOVUPS (DI)(AX*1), Y8
	VMOVUPS (R11)(AX*1), Y9
	VMOVUPS (SI)(AX*1), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y4
	VMOVUPS (R8)(AX*1), Y11
	VFMADD231PS Y8, Y11, Y1
	VFMADD231PS Y9, Y11, Y5
	VMOVUPS (R9)(AX*1), Y12
	VFMADD231PS Y8, Y12, Y2
	VFMADD231PS Y9, Y12, Y6
	VMOVUPS (R10)(AX*1), Y13
	VFMADD231PS Y8, Y13, Y3
	VFMADD231PS Y9, Y13, Y7
	ADDQ $32, AX
	CMPQ AX, CX
	JLT  loop

	// Horizontal sums: hadd(hadd(a, b), hadd(c, d)) leaves in each
	// 128-bit half the partial sums of a, b, c, d; adding the halves
	// gives the four dot products.
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DX)
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VMOVUPS X4, 16(DX)
	VZEROUPPER
	RET

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-4
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	RET

// func decodeF16F16C(dst *float32, src *byte, n int)
//
// Converts n float16 values (little endian) to float32, n a multiple of 8.
TEXT ·decodeF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   done

convert:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       convert

done:
	VZEROUPPER
	RET

// func encodeF16F16C(dst *byte, src *float32, n int)
//
// Converts n float32 values to float16 (little endian), rounding to
// nearest even (immediate 0, whatever MXCSR says), n a multiple of 8.
TEXT ·encodeF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   encdone

encode:
	VMOVUPS   (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       encode

encdone:
	VZEROUPPER
	RET

// func residualMaxAVX2(best, cent *int16, rows int, nib *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) (ok bool)
//
// For each block of 32 lanes (16-bit, two registers): for each token (the
// n first, or the n listed in keep when it is not nil), the accumulators
// start as the token's centroid row (64 bytes) of the block's centroid
// table, get the nibble table's row for each nibble of the code added (low
// nibble of each byte first; a nibble position's 16 rows take 1024 bytes),
// and best keeps the signed maximum. An id ≥ rows stops the kernel with ok
// false before anything of the current block is stored.
TEXT ·residualMaxAVX2(SB), NOSPLIT, $0-81
	MOVQ best+0(FP), DX
	MOVQ cent+8(FP), BX
	MOVQ rows+16(FP), R9
	MOVQ nib+24(FP), SI
	MOVQ blocks+32(FP), R15
	MOVQ cids+40(FP), R10
	MOVQ n+64(FP), R11
	MOVQ R9, R14
	SHLQ $6, R14

rblock:
	VMOVDQU 0(DX), Y0
	VMOVDQU 32(DX), Y1
	XORQ    AX, AX

rtoken:
	// R8 = the token's index: AX, or keep[AX].
	MOVQ    AX, R8
	MOVQ    keep+56(FP), R13
	TESTQ   R13, R13
	JZ      rindex
	MOVLQSX (R13)(AX*4), R8

rindex:
	MOVQ    codeBytes+72(FP), DI
	IMULQ   R8, DI
	ADDQ    codes+48(FP), DI
	MOVWQZX (R10)(R8*2), R13
	CMPQ    R13, R9
	JAE     rbad
	SHLQ    $6, R13
	VMOVDQU 0(BX)(R13*1), Y4
	VMOVDQU 32(BX)(R13*1), Y5
	// The high nibbles' rows go to Y6 and Y7, added to Y4 and Y5 at the
	// end: two chains of dependent adds per register half instead of one,
	// and the same sums (16-bit adds wrap, so their order does not
	// matter).
	VPXOR   Y6, Y6, Y6
	VPXOR   Y7, Y7, Y7
	MOVQ    SI, R12
	MOVQ    codeBytes+72(FP), CX

rbyte:
	MOVBQZX (DI), R13
	MOVQ    R13, R8
	ANDQ    $15, R13
	SHLQ    $6, R13
	SHRQ    $4, R8
	SHLQ    $6, R8
	VPADDW  0(R12)(R13*1), Y4, Y4
	VPADDW  32(R12)(R13*1), Y5, Y5
	VPADDW  1024(R12)(R8*1), Y6, Y6
	VPADDW  1056(R12)(R8*1), Y7, Y7
	ADDQ    $2048, R12
	INCQ    DI
	DECQ    CX
	JNZ     rbyte

	VPADDW  Y6, Y4, Y4
	VPADDW  Y7, Y5, Y5
	VPMAXSW Y4, Y0, Y0
	VPMAXSW Y5, Y1, Y1
	INCQ    AX
	CMPQ    AX, R11
	JLT     rtoken

	VMOVDQU Y0, 0(DX)
	VMOVDQU Y1, 32(DX)
	ADDQ    $64, DX
	ADDQ    R14, BX
	MOVQ    R12, SI
	DECQ    R15
	JNZ     rblock

	MOVB $1, ok+80(FP)
	VZEROUPPER
	RET

rbad:
	MOVB $0, ok+80(FP)
	VZEROUPPER
	RET

// func residualMaxAVX512(best, cent *int16, rows int, nib *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) (ok bool)
//
// residualMaxAVX2 with AVX-512BW: a block's 32 lanes in one register, and
// four chains of adds (the low and high nibbles of even and odd code
// bytes), added together at the end: the same 16-bit sums, which wrap.
// codeBytes must be even.
TEXT ·residualMaxAVX512(SB), NOSPLIT, $0-81
	MOVQ best+0(FP), DX
	MOVQ cent+8(FP), BX
	MOVQ rows+16(FP), R9
	MOVQ nib+24(FP), SI
	MOVQ blocks+32(FP), R15
	MOVQ cids+40(FP), R10
	MOVQ n+64(FP), R11
	MOVQ R9, R14
	SHLQ $6, R14

zblock:
	VMOVDQU16 0(DX), Z0
	XORQ      AX, AX

ztoken:
	MOVQ    AX, R8
	MOVQ    keep+56(FP), R13
	TESTQ   R13, R13
	JZ      zindex
	MOVLQSX (R13)(AX*4), R8

zindex:
	MOVQ      codeBytes+72(FP), DI
	IMULQ     R8, DI
	ADDQ      codes+48(FP), DI
	MOVWQZX   (R10)(R8*2), R13
	CMPQ      R13, R9
	JAE       zbad
	SHLQ      $6, R13
	VMOVDQU16 0(BX)(R13*1), Z4
	VPXORD    Z5, Z5, Z5
	VPXORD    Z6, Z6, Z6
	VPXORD    Z7, Z7, Z7
	MOVQ      SI, R12
	MOVQ      codeBytes+72(FP), CX
	SHRQ      $1, CX

zbyte:
	MOVBQZX (DI), R13
	MOVQ    R13, R8
	ANDQ    $15, R13
	SHLQ    $6, R13
	SHRQ    $4, R8
	SHLQ    $6, R8
	VPADDW  0(R12)(R13*1), Z4, Z4
	VPADDW  1024(R12)(R8*1), Z5, Z5
	MOVBQZX 1(DI), R13
	MOVQ    R13, R8
	ANDQ    $15, R13
	SHLQ    $6, R13
	SHRQ    $4, R8
	SHLQ    $6, R8
	VPADDW  2048(R12)(R13*1), Z6, Z6
	VPADDW  3072(R12)(R8*1), Z7, Z7
	ADDQ    $4096, R12
	ADDQ    $2, DI
	DECQ    CX
	JNZ     zbyte

	VPADDW  Z5, Z4, Z4
	VPADDW  Z7, Z6, Z6
	VPADDW  Z6, Z4, Z4
	VPMAXSW Z4, Z0, Z0
	INCQ    AX
	CMPQ    AX, R11
	JLT     ztoken

	VMOVDQU16 Z0, 0(DX)
	ADDQ      $64, DX
	ADDQ      R14, BX
	MOVQ      R12, SI
	DECQ      R15
	JNZ       zblock

	MOVB $1, ok+80(FP)
	VZEROUPPER
	RET

zbad:
	MOVB $0, ok+80(FP)
	VZEROUPPER
	RET

// func maxF32AVX2(p *float32, n int) float32
//
// The largest of n values at p, n a positive multiple of 32, in four
// accumulators of 8 lanes. Each step keeps the accumulator when the value
// is NaN (VMAXPS returns its second source then), so NaNs are passed over;
// the result is -Inf when every value is NaN or -Inf.
TEXT ·maxF32AVX2(SB), NOSPLIT, $0-20
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xff800000, AX
	MOVL AX, X0
	VBROADCASTSS X0, Y0
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3
maxloop:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS Y0, Y4, Y0
	VMAXPS Y1, Y5, Y1
	VMAXPS Y2, Y6, Y2
	VMAXPS Y3, Y7, Y3
	ADDQ $128, SI
	SUBQ $32, CX
	JNZ maxloop
	VMAXPS Y0, Y1, Y0
	VMAXPS Y2, Y3, Y2
	VMAXPS Y0, Y2, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X0, X1, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X0, X1, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X0, X1, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// ZERO16 clears the accumulators Z0..Z15.
#define ZERO16 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15

// func maxSim8x32AVX512(qt *float32, d *float32, stride, dim int, best *float32)
//
// best[l] = max(best[l], <q_l, d_j>) over the 8 rows d_j at d + j*stride
// floats, for the 32 query tokens l whose values are laid out k-major at
// qt (qt[k*32+l] is value k of query token l), dim ≥ 1 values each. Each
// product is one fused multiply-add per value in order k = 0, 1, ..., in
// its own lane, so its value does not depend on where the row falls. The
// maxima are taken with VMAXPS, best as second source.
TEXT ·maxSim8x32AVX512(SB), NOSPLIT, $0-40
	MOVQ qt+0(FP), SI
	MOVQ d+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ dim+24(FP), CX
	MOVQ best+32(FP), DX
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	LEAQ (DI)(R8*4), R10
	ZERO16

loop32:
	VMOVUPS      (SI), Z16
	VMOVUPS      64(SI), Z17
	VBROADCASTSS (DI), Z18
	VFMADD231PS  Z18, Z16, Z0
	VFMADD231PS  Z18, Z17, Z1
	VBROADCASTSS (DI)(R8*1), Z19
	VFMADD231PS  Z19, Z16, Z2
	VFMADD231PS  Z19, Z17, Z3
	VBROADCASTSS (DI)(R8*2), Z20
	VFMADD231PS  Z20, Z16, Z4
	VFMADD231PS  Z20, Z17, Z5
	VBROADCASTSS (DI)(R9*1), Z21
	VFMADD231PS  Z21, Z16, Z6
	VFMADD231PS  Z21, Z17, Z7
	VBROADCASTSS (R10), Z22
	VFMADD231PS  Z22, Z16, Z8
	VFMADD231PS  Z22, Z17, Z9
	VBROADCASTSS (R10)(R8*1), Z23
	VFMADD231PS  Z23, Z16, Z10
	VFMADD231PS  Z23, Z17, Z11
	VBROADCASTSS (R10)(R8*2), Z24
	VFMADD231PS  Z24, Z16, Z12
	VFMADD231PS  Z24, Z17, Z13
	VBROADCASTSS (R10)(R9*1), Z25
	VFMADD231PS  Z25, Z16, Z14
	VFMADD231PS  Z25, Z17, Z15
	ADDQ         $128, SI
	ADDQ         $4, DI
	ADDQ         $4, R10
	DECQ         CX
	JNZ          loop32

	VMAXPS  Z2, Z0, Z0
	VMAXPS  Z4, Z0, Z0
	VMAXPS  Z6, Z0, Z0
	VMAXPS  Z8, Z0, Z0
	VMAXPS  Z10, Z0, Z0
	VMAXPS  Z12, Z0, Z0
	VMAXPS  Z14, Z0, Z0
	VMAXPS  Z3, Z1, Z1
	VMAXPS  Z5, Z1, Z1
	VMAXPS  Z7, Z1, Z1
	VMAXPS  Z9, Z1, Z1
	VMAXPS  Z11, Z1, Z1
	VMAXPS  Z13, Z1, Z1
	VMAXPS  Z15, Z1, Z1
	VMOVUPS (DX), Z16
	VMOVUPS 64(DX), Z17
	VMAXPS  Z16, Z0, Z0
	VMAXPS  Z17, Z1, Z1
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VZEROUPPER
	RET

// func maxSim8x16AVX512(qt *float32, d *float32, stride, dim int, best *float32)
//
// maxSim8x32AVX512 for 16 query tokens (qt[k*16+l]).
TEXT ·maxSim8x16AVX512(SB), NOSPLIT, $0-40
	MOVQ qt+0(FP), SI
	MOVQ d+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ dim+24(FP), CX
	MOVQ best+32(FP), DX
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	LEAQ (DI)(R8*4), R10
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

loop16:
	VMOVUPS      (SI), Z16
	VBROADCASTSS (DI), Z18
	VFMADD231PS  Z18, Z16, Z0
	VBROADCASTSS (DI)(R8*1), Z19
	VFMADD231PS  Z19, Z16, Z1
	VBROADCASTSS (DI)(R8*2), Z20
	VFMADD231PS  Z20, Z16, Z2
	VBROADCASTSS (DI)(R9*1), Z21
	VFMADD231PS  Z21, Z16, Z3
	VBROADCASTSS (R10), Z22
	VFMADD231PS  Z22, Z16, Z4
	VBROADCASTSS (R10)(R8*1), Z23
	VFMADD231PS  Z23, Z16, Z5
	VBROADCASTSS (R10)(R8*2), Z24
	VFMADD231PS  Z24, Z16, Z6
	VBROADCASTSS (R10)(R9*1), Z25
	VFMADD231PS  Z25, Z16, Z7
	ADDQ         $64, SI
	ADDQ         $4, DI
	ADDQ         $4, R10
	DECQ         CX
	JNZ          loop16

	VMAXPS  Z1, Z0, Z0
	VMAXPS  Z2, Z0, Z0
	VMAXPS  Z3, Z0, Z0
	VMAXPS  Z4, Z0, Z0
	VMAXPS  Z5, Z0, Z0
	VMAXPS  Z6, Z0, Z0
	VMAXPS  Z7, Z0, Z0
	VMOVUPS (DX), Z16
	VMAXPS  Z16, Z0, Z0
	VMOVUPS Z0, (DX)
	VZEROUPPER
	RET

// func dot8x32AVX512(qt *float32, d *float32, stride, dim int, out *float32, ldo int)
//
// out[j*ldo+l] = <q_l, d_j> for the 8 rows d_j at d + j*stride floats and
// the 32 query tokens l laid out at qt as for maxSim8x32AVX512, each
// product summed the same way (so it equals the one maxSim8x32AVX512
// takes the maximum of, to the bit).
TEXT ·dot8x32AVX512(SB), NOSPLIT, $0-48
	MOVQ qt+0(FP), SI
	MOVQ d+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ dim+24(FP), CX
	MOVQ out+32(FP), DX
	MOVQ ldo+40(FP), R11
	SHLQ $2, R11
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	LEAQ (DI)(R8*4), R10
	ZERO16

dloop32:
	VMOVUPS      (SI), Z16
	VMOVUPS      64(SI), Z17
	VBROADCASTSS (DI), Z18
	VFMADD231PS  Z18, Z16, Z0
	VFMADD231PS  Z18, Z17, Z1
	VBROADCASTSS (DI)(R8*1), Z19
	VFMADD231PS  Z19, Z16, Z2
	VFMADD231PS  Z19, Z17, Z3
	VBROADCASTSS (DI)(R8*2), Z20
	VFMADD231PS  Z20, Z16, Z4
	VFMADD231PS  Z20, Z17, Z5
	VBROADCASTSS (DI)(R9*1), Z21
	VFMADD231PS  Z21, Z16, Z6
	VFMADD231PS  Z21, Z17, Z7
	VBROADCASTSS (R10), Z22
	VFMADD231PS  Z22, Z16, Z8
	VFMADD231PS  Z22, Z17, Z9
	VBROADCASTSS (R10)(R8*1), Z23
	VFMADD231PS  Z23, Z16, Z10
	VFMADD231PS  Z23, Z17, Z11
	VBROADCASTSS (R10)(R8*2), Z24
	VFMADD231PS  Z24, Z16, Z12
	VFMADD231PS  Z24, Z17, Z13
	VBROADCASTSS (R10)(R9*1), Z25
	VFMADD231PS  Z25, Z16, Z14
	VFMADD231PS  Z25, Z17, Z15
	ADDQ         $128, SI
	ADDQ         $4, DI
	ADDQ         $4, R10
	DECQ         CX
	JNZ          dloop32


	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	ADDQ    R11, DX
	VMOVUPS Z2, (DX)
	VMOVUPS Z3, 64(DX)
	ADDQ    R11, DX
	VMOVUPS Z4, (DX)
	VMOVUPS Z5, 64(DX)
	ADDQ    R11, DX
	VMOVUPS Z6, (DX)
	VMOVUPS Z7, 64(DX)
	ADDQ    R11, DX
	VMOVUPS Z8, (DX)
	VMOVUPS Z9, 64(DX)
	ADDQ    R11, DX
	VMOVUPS Z10, (DX)
	VMOVUPS Z11, 64(DX)
	ADDQ    R11, DX
	VMOVUPS Z12, (DX)
	VMOVUPS Z13, 64(DX)
	ADDQ    R11, DX
	VMOVUPS Z14, (DX)
	VMOVUPS Z15, 64(DX)
	ADDQ    R11, DX
	VZEROUPPER
	RET

// func dot8x16AVX512(qt *float32, d *float32, stride, dim int, out *float32, ldo int)
//
// dot8x32AVX512 for 16 query tokens (qt[k*16+l]).
TEXT ·dot8x16AVX512(SB), NOSPLIT, $0-48
	MOVQ qt+0(FP), SI
	MOVQ d+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ dim+24(FP), CX
	MOVQ out+32(FP), DX
	MOVQ ldo+40(FP), R11
	SHLQ $2, R11
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	LEAQ (DI)(R8*4), R10
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

dloop16:
	VMOVUPS      (SI), Z16
	VBROADCASTSS (DI), Z18
	VFMADD231PS  Z18, Z16, Z0
	VBROADCASTSS (DI)(R8*1), Z19
	VFMADD231PS  Z19, Z16, Z1
	VBROADCASTSS (DI)(R8*2), Z20
	VFMADD231PS  Z20, Z16, Z2
	VBROADCASTSS (DI)(R9*1), Z21
	VFMADD231PS  Z21, Z16, Z3
	VBROADCASTSS (R10), Z22
	VFMADD231PS  Z22, Z16, Z4
	VBROADCASTSS (R10)(R8*1), Z23
	VFMADD231PS  Z23, Z16, Z5
	VBROADCASTSS (R10)(R8*2), Z24
	VFMADD231PS  Z24, Z16, Z6
	VBROADCASTSS (R10)(R9*1), Z25
	VFMADD231PS  Z25, Z16, Z7
	ADDQ         $64, SI
	ADDQ         $4, DI
	ADDQ         $4, R10
	DECQ         CX
	JNZ          dloop16


	VMOVUPS Z0, (DX)
	ADDQ    R11, DX
	VMOVUPS Z1, (DX)
	ADDQ    R11, DX
	VMOVUPS Z2, (DX)
	ADDQ    R11, DX
	VMOVUPS Z3, (DX)
	ADDQ    R11, DX
	VMOVUPS Z4, (DX)
	ADDQ    R11, DX
	VMOVUPS Z5, (DX)
	ADDQ    R11, DX
	VMOVUPS Z6, (DX)
	ADDQ    R11, DX
	VMOVUPS Z7, (DX)
	ADDQ    R11, DX
	VZEROUPPER
	RET

// func residualPairAVX512(best, cent *int16, rows int, pair *int16, blocks int, cids *uint16, codes *byte, keep *int32, n, codeBytes int) (ok bool)
//
// residualMaxAVX512 with one lookup per code byte instead of one per
// nibble: pair holds, per block, codeBytes tables of 256 rows of 32 lanes
// (the sums of the two nibbles' values). Half the loads and a third of the
// scalar work per token; the same 16-bit sums, which wrap. codeBytes must
// be a multiple of 4.
TEXT ·residualPairAVX512(SB), NOSPLIT, $0-81
	MOVQ best+0(FP), DX
	MOVQ cent+8(FP), BX
	MOVQ rows+16(FP), R9
	MOVQ pair+24(FP), SI
	MOVQ blocks+32(FP), R15
	MOVQ cids+40(FP), R10
	MOVQ n+64(FP), R11
	MOVQ R9, R14
	SHLQ $6, R14

pblock:
	VMOVDQU16 0(DX), Z0
	XORQ      AX, AX

ptoken:
	MOVQ    AX, R8
	MOVQ    keep+56(FP), R13
	TESTQ   R13, R13
	JZ      pindex
	MOVLQSX (R13)(AX*4), R8

pindex:
	MOVQ      codeBytes+72(FP), DI
	IMULQ     R8, DI
	ADDQ      codes+48(FP), DI
	MOVWQZX   (R10)(R8*2), R13
	CMPQ      R13, R9
	JAE       pbad
	SHLQ      $6, R13
	VMOVDQU16 0(BX)(R13*1), Z4
	VPXORD    Z5, Z5, Z5
	VPXORD    Z6, Z6, Z6
	VPXORD    Z7, Z7, Z7
	MOVQ      SI, R12
	MOVQ      codeBytes+72(FP), CX
	SHRQ      $2, CX

pbyte:
	MOVBQZX 0(DI), R13
	MOVBQZX 1(DI), R8
	SHLQ    $6, R13
	SHLQ    $6, R8
	VPADDW  0(R12)(R13*1), Z4, Z4
	VPADDW  16384(R12)(R8*1), Z5, Z5
	MOVBQZX 2(DI), R13
	MOVBQZX 3(DI), R8
	SHLQ    $6, R13
	SHLQ    $6, R8
	VPADDW  32768(R12)(R13*1), Z6, Z6
	VPADDW  49152(R12)(R8*1), Z7, Z7
	ADDQ    $65536, R12
	ADDQ    $4, DI
	DECQ    CX
	JNZ     pbyte

	VPADDW  Z5, Z4, Z4
	VPADDW  Z7, Z6, Z6
	VPADDW  Z6, Z4, Z4
	VPMAXSW Z4, Z0, Z0
	INCQ    AX
	CMPQ    AX, R11
	JLT     ptoken

	VMOVDQU16 Z0, 0(DX)
	ADDQ      $64, DX
	ADDQ      R14, BX
	MOVQ      R12, SI
	DECQ      R15
	JNZ       pblock

	MOVB $1, ok+80(FP)
	VZEROUPPER
	RET

pbad:
	MOVB $0, ok+80(FP)
	VZEROUPPER
	RET

// func argmax8x32AVX512(qt *float32, rows *float32, n, dim int, best *float32, idx *int32, base int)
//
// For the 32 query tokens (lanes) laid out at qt as for maxSim8x32AVX512
// and the n rows (a multiple of 8) of dim values at rows, one after the
// other: where <q_l, row j> > best[l] (VCMPPS GT_OQ: false on NaN), rows
// taken in order, best[l] becomes that product and idx[l] base + j. So
// each lane ends with its largest product and the lowest row among equal
// ones. Products are summed as maxSim8x32AVX512 sums them.
TEXT ·argmax8x32AVX512(SB), NOSPLIT, $0-56
	MOVQ         qt+0(FP), R12
	MOVQ         rows+8(FP), DI
	MOVQ         n+16(FP), R13
	MOVQ         dim+24(FP), R8
	MOVQ         best+32(FP), DX
	MOVQ         idx+40(FP), R11
	VMOVUPS      (DX), Z26
	VMOVUPS      64(DX), Z27
	VMOVDQU32    (R11), Z28
	VMOVDQU32    64(R11), Z29
	VPBROADCASTD base+48(FP), Z30
	MOVL         $1, AX
	VPBROADCASTD AX, Z31
	SHRQ         $3, R13
	SHLQ         $2, R8
	LEAQ         (R8)(R8*2), R9

agroup:
	MOVQ   R12, SI
	MOVQ   dim+24(FP), CX
	LEAQ   (DI)(R8*4), R10
	MOVQ   DI, BX
	ZERO16

aloop32:
	VMOVUPS      (SI), Z16
	VMOVUPS      64(SI), Z17
	VBROADCASTSS (DI), Z18
	VFMADD231PS  Z18, Z16, Z0
	VFMADD231PS  Z18, Z17, Z1
	VBROADCASTSS (DI)(R8*1), Z19
	VFMADD231PS  Z19, Z16, Z2
	VFMADD231PS  Z19, Z17, Z3
	VBROADCASTSS (DI)(R8*2), Z20
	VFMADD231PS  Z20, Z16, Z4
	VFMADD231PS  Z20, Z17, Z5
	VBROADCASTSS (DI)(R9*1), Z21
	VFMADD231PS  Z21, Z16, Z6
	VFMADD231PS  Z21, Z17, Z7
	VBROADCASTSS (R10), Z22
	VFMADD231PS  Z22, Z16, Z8
	VFMADD231PS  Z22, Z17, Z9
	VBROADCASTSS (R10)(R8*1), Z23
	VFMADD231PS  Z23, Z16, Z10
	VFMADD231PS  Z23, Z17, Z11
	VBROADCASTSS (R10)(R8*2), Z24
	VFMADD231PS  Z24, Z16, Z12
	VFMADD231PS  Z24, Z17, Z13
	VBROADCASTSS (R10)(R9*1), Z25
	VFMADD231PS  Z25, Z16, Z14
	VFMADD231PS  Z25, Z17, Z15
	ADDQ         $128, SI
	ADDQ         $4, DI
	ADDQ         $4, R10
	DECQ         CX
	JNZ          aloop32


	VCMPPS    $0x1e, Z26, Z0, K1
	VCMPPS    $0x1e, Z27, Z1, K2
	VMOVAPS   Z0, K1, Z26
	VMOVAPS   Z1, K2, Z27
	VMOVDQA32 Z30, K1, Z28
	VMOVDQA32 Z30, K2, Z29
	VPADDD    Z31, Z30, Z30
	VCMPPS    $0x1e, Z26, Z2, K1
	VCMPPS    $0x1e, Z27, Z3, K2
	VMOVAPS   Z2, K1, Z26
	VMOVAPS   Z3, K2, Z27
	VMOVDQA32 Z30, K1, Z28
	VMOVDQA32 Z30, K2, Z29
	VPADDD    Z31, Z30, Z30
	VCMPPS    $0x1e, Z26, Z4, K1
	VCMPPS    $0x1e, Z27, Z5, K2
	VMOVAPS   Z4, K1, Z26
	VMOVAPS   Z5, K2, Z27
	VMOVDQA32 Z30, K1, Z28
	VMOVDQA32 Z30, K2, Z29
	VPADDD    Z31, Z30, Z30
	VCMPPS    $0x1e, Z26, Z6, K1
	VCMPPS    $0x1e, Z27, Z7, K2
	VMOVAPS   Z6, K1, Z26
	VMOVAPS   Z7, K2, Z27
	VMOVDQA32 Z30, K1, Z28
	VMOVDQA32 Z30, K2, Z29
	VPADDD    Z31, Z30, Z30
	VCMPPS    $0x1e, Z26, Z8, K1
	VCMPPS    $0x1e, Z27, Z9, K2
	VMOVAPS   Z8, K1, Z26
	VMOVAPS   Z9, K2, Z27
	VMOVDQA32 Z30, K1, Z28
	VMOVDQA32 Z30, K2, Z29
	VPADDD    Z31, Z30, Z30
	VCMPPS    $0x1e, Z26, Z10, K1
	VCMPPS    $0x1e, Z27, Z11, K2
	VMOVAPS   Z10, K1, Z26
	VMOVAPS   Z11, K2, Z27
	VMOVDQA32 Z30, K1, Z28
	VMOVDQA32 Z30, K2, Z29
	VPADDD    Z31, Z30, Z30
	VCMPPS    $0x1e, Z26, Z12, K1
	VCMPPS    $0x1e, Z27, Z13, K2
	VMOVAPS   Z12, K1, Z26
	VMOVAPS   Z13, K2, Z27
	VMOVDQA32 Z30, K1, Z28
	VMOVDQA32 Z30, K2, Z29
	VPADDD    Z31, Z30, Z30
	VCMPPS    $0x1e, Z26, Z14, K1
	VCMPPS    $0x1e, Z27, Z15, K2
	VMOVAPS   Z14, K1, Z26
	VMOVAPS   Z15, K2, Z27
	VMOVDQA32 Z30, K1, Z28
	VMOVDQA32 Z30, K2, Z29
	VPADDD    Z31, Z30, Z30
	MOVQ BX, DI
	LEAQ (DI)(R8*8), DI
	DECQ R13
	JNZ  agroup

	VMOVUPS   Z26, (DX)
	VMOVUPS   Z27, 64(DX)
	VMOVDQU32 Z28, (R11)
	VMOVDQU32 Z29, 64(R11)
	VZEROUPPER
	RET

// VNNI8x32 is one step of the int8 kernels' inner loop: four values of
// the 32 lanes at SI against four of each of the 8 rows at DI, DI+R8,
// DI+2*R8, DI+R9 (3*R8) and R10 (DI+4*R8) on, summed into Z0..Z15 (row r's
// lanes 0-15 in Z(2r), 16-31 in Z(2r+1)); then SI, DI and R10 step on.
#define VNNI8x32 \
	VMOVDQU32     (SI), Z16 \
	VMOVDQU32     64(SI), Z17 \
	VPDPBUSD.BCST (DI), Z16, Z0 \
	VPDPBUSD.BCST (DI), Z17, Z1 \
	VPDPBUSD.BCST (DI)(R8*1), Z16, Z2 \
	VPDPBUSD.BCST (DI)(R8*1), Z17, Z3 \
	VPDPBUSD.BCST (DI)(R8*2), Z16, Z4 \
	VPDPBUSD.BCST (DI)(R8*2), Z17, Z5 \
	VPDPBUSD.BCST (DI)(R9*1), Z16, Z6 \
	VPDPBUSD.BCST (DI)(R9*1), Z17, Z7 \
	VPDPBUSD.BCST (R10), Z16, Z8 \
	VPDPBUSD.BCST (R10), Z17, Z9 \
	VPDPBUSD.BCST (R10)(R8*1), Z16, Z10 \
	VPDPBUSD.BCST (R10)(R8*1), Z17, Z11 \
	VPDPBUSD.BCST (R10)(R8*2), Z16, Z12 \
	VPDPBUSD.BCST (R10)(R8*2), Z17, Z13 \
	VPDPBUSD.BCST (R10)(R9*1), Z16, Z14 \
	VPDPBUSD.BCST (R10)(R9*1), Z17, Z15 \
	ADDQ          $128, SI \
	ADDQ          $4, DI \
	ADDQ          $4, R10

// func maxSimI8x32VNNI(qt *byte, d *byte, stride, dim int, best *float32)
//
// best[l] = max(best[l], s_j * <q_l, d_j>) over the 8 int8 rows d_j at
// d + j*stride bytes (dim values, a multiple of 64), each preceded by its
// float32 scale s_j, for the 32 int8 query tokens l laid out as
// queryI8.lanes: qt[(k/4)*128 + 4*l + k%4] = q_l[k] + 128, unsigned.
// VPDPBUSD multiplies those unsigned bytes by the row's signed bytes, four
// at a time with the row's four values broadcast, so each lane sums
// (q_l[k] + 128) * d_j[k]; the row's own sum, 128 * Σ d_j[k], taken with
// VPSADBW, is subtracted. The integer sums are exact, and so is their
// conversion to float32 (|sum| ≤ 127*127*dim < 2^24 for dim ≤ 1040); the
// one rounding is the multiplication by s_j, as in maxSimI8Go.
TEXT ·maxSimI8x32VNNI(SB), NOSPLIT, $0-40
	MOVQ qt+0(FP), SI
	MOVQ d+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ dim+24(FP), CX
	MOVQ best+32(FP), DX
	LEAQ (R8)(R8*2), R9
	LEAQ (DI)(R8*4), R10
	MOVQ DI, R11
	MOVQ R10, R12
	MOVQ CX, R13
	SHRQ $2, CX
	ZERO16

i8loop:
	VNNI8x32
	DECQ          CX
	JNZ           i8loop

	// Each row's bytes as unsigned (x ^ 0x80 = x + 128), summed 8 at a
	// time into 64-bit lanes: Z18..Z25 for rows 0..7.
	MOVL         $0x80808080, AX
	VPBROADCASTD AX, Z28
	VPXORD       Z29, Z29, Z29
	VPXORD       Z18, Z18, Z18
	VPXORD       Z19, Z19, Z19
	VPXORD       Z20, Z20, Z20
	VPXORD       Z21, Z21, Z21
	VPXORD       Z22, Z22, Z22
	VPXORD       Z23, Z23, Z23
	VPXORD       Z24, Z24, Z24
	VPXORD       Z25, Z25, Z25
	MOVQ         R11, DI
	MOVQ         R12, R10
	MOVQ         R13, CX
	SHRQ         $6, CX

i8sum:
	VPXORD  (DI), Z28, Z27
	VPSADBW Z29, Z27, Z27
	VPADDQ  Z27, Z18, Z18
	VPXORD  (DI)(R8*1), Z28, Z27
	VPSADBW Z29, Z27, Z27
	VPADDQ  Z27, Z19, Z19
	VPXORD  (DI)(R8*2), Z28, Z27
	VPSADBW Z29, Z27, Z27
	VPADDQ  Z27, Z20, Z20
	VPXORD  (DI)(R9*1), Z28, Z27
	VPSADBW Z29, Z27, Z27
	VPADDQ  Z27, Z21, Z21
	VPXORD  (R10), Z28, Z27
	VPSADBW Z29, Z27, Z27
	VPADDQ  Z27, Z22, Z22
	VPXORD  (R10)(R8*1), Z28, Z27
	VPSADBW Z29, Z27, Z27
	VPADDQ  Z27, Z23, Z23
	VPXORD  (R10)(R8*2), Z28, Z27
	VPSADBW Z29, Z27, Z27
	VPADDQ  Z27, Z24, Z24
	VPXORD  (R10)(R9*1), Z28, Z27
	VPSADBW Z29, Z27, Z27
	VPADDQ  Z27, Z25, Z25
	ADDQ    $64, DI
	ADDQ    $64, R10
	DECQ    CX
	JNZ     i8sum

	// 128 * dim, the sum's offset from Σ d_j[k], in every lane.
	MOVQ         R13, AX
	SHLQ         $7, AX
	VPBROADCASTD AX, Z30

// I8ROW finishes row sums (the row's unsigned sum in the 64-bit lanes of
// sums), subtracts 128 * Σ d_j[k] from the lanes a and b, converts them to
// float32 and multiplies them by the row's scale at scale.
#define I8ROW(zs, ys, xs, a, b, scale) \
	VEXTRACTI64X4 $1, zs, Y27; \
	VPADDQ        Y27, ys, ys; \
	VEXTRACTI32X4 $1, ys, X27; \
	VPADDQ        X27, xs, xs; \
	VPSHUFD       $0x4e, xs, X27; \
	VPADDQ        X27, xs, xs; \
	VPBROADCASTD  xs, Z27; \
	VPSUBD        Z30, Z27, Z27; \
	VPSLLD        $7, Z27, Z27; \
	VPSUBD        Z27, a, a; \
	VPSUBD        Z27, b, b; \
	VCVTDQ2PS     a, a; \
	VCVTDQ2PS     b, b; \
	VBROADCASTSS  scale, Z27; \
	VMULPS        Z27, a, a; \
	VMULPS        Z27, b, b

	I8ROW(Z18, Y18, X18, Z0, Z1, -4(R11))
	I8ROW(Z19, Y19, X19, Z2, Z3, -4(R11)(R8*1))
	I8ROW(Z20, Y20, X20, Z4, Z5, -4(R11)(R8*2))
	I8ROW(Z21, Y21, X21, Z6, Z7, -4(R11)(R9*1))
	I8ROW(Z22, Y22, X22, Z8, Z9, -4(R12))
	I8ROW(Z23, Y23, X23, Z10, Z11, -4(R12)(R8*1))
	I8ROW(Z24, Y24, X24, Z12, Z13, -4(R12)(R8*2))
	I8ROW(Z25, Y25, X25, Z14, Z15, -4(R12)(R9*1))

	VMAXPS  Z2, Z0, Z0
	VMAXPS  Z4, Z0, Z0
	VMAXPS  Z6, Z0, Z0
	VMAXPS  Z8, Z0, Z0
	VMAXPS  Z10, Z0, Z0
	VMAXPS  Z12, Z0, Z0
	VMAXPS  Z14, Z0, Z0
	VMAXPS  Z3, Z1, Z1
	VMAXPS  Z5, Z1, Z1
	VMAXPS  Z7, Z1, Z1
	VMAXPS  Z9, Z1, Z1
	VMAXPS  Z11, Z1, Z1
	VMAXPS  Z13, Z1, Z1
	VMAXPS  Z15, Z1, Z1
	VMOVUPS (DX), Z16
	VMOVUPS 64(DX), Z17
	VMAXPS  Z16, Z0, Z0
	VMAXPS  Z17, Z1, Z1
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VZEROUPPER
	RET

// func decodeI8AVX512(dst *float32, src *byte, scale float32, n int)
//
// dst[i] = float32(int8(src[i])) * scale for n values, a multiple of 16:
// the exact conversion, then one rounding, as the portable decoding.
TEXT ·decodeI8AVX512(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	VBROADCASTSS scale+16(FP), Z1
	MOVQ         n+24(FP), CX
	SHRQ         $4, CX

i8dec:
	VPMOVSXBD (SI), Z0
	VCVTDQ2PS Z0, Z0
	VMULPS    Z1, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       i8dec
	VZEROUPPER
	RET

// func maxSimI8x32AVX2(qabs, qsgn, d *byte, stride, dim, rows int, best *float32)
//
// maxSimI8x32VNNI with AVX2, over rows rows (a positive even number) two
// at a time: qabs holds |q_l[k]| and qsgn q_l[k] in the lanes' layout
// (queryI8.abs, queryI8.sgn), dim is a multiple of 4. Per four values and
// eight lanes, VPSIGNB gives the row's bytes the query's signs,
// VPMADDUBSW multiplies them by |q| into pairs (each at most 2*127*127,
// so never saturated), and VPMADDWD adds the pairs into 32-bit sums: the
// same exact integers as VPDPBUSD's, then the same conversion and
// multiplication by the row's scale.
TEXT ·maxSimI8x32AVX2(SB), NOSPLIT, $0-56
	MOVQ         qabs+0(FP), AX
	MOVQ         qsgn+8(FP), BX
	MOVQ         d+16(FP), DI
	MOVQ         stride+24(FP), R8
	MOVQ         dim+32(FP), R9
	MOVQ         rows+40(FP), R10
	MOVQ         best+48(FP), DX
	MOVL         $0x00010001, R11
	MOVQ         R11, X15
	VPBROADCASTD X15, Y15

i8pair:
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	MOVQ  AX, SI
	MOVQ  BX, R12
	MOVQ  DI, R13
	LEAQ  (DI)(R8*1), R14
	MOVQ  R9, CX
	SHRQ  $2, CX

i8quad:
	VMOVDQU      (SI), Y8
	VMOVDQU      32(SI), Y9
	VMOVDQU      64(SI), Y10
	VMOVDQU      96(SI), Y11
	VPBROADCASTD (R13), Y12
	VPSIGNB      (R12), Y12, Y13
	VPMADDUBSW   Y13, Y8, Y13
	VPMADDWD     Y15, Y13, Y13
	VPADDD       Y13, Y0, Y0
	VPSIGNB      32(R12), Y12, Y13
	VPMADDUBSW   Y13, Y9, Y13
	VPMADDWD     Y15, Y13, Y13
	VPADDD       Y13, Y1, Y1
	VPSIGNB      64(R12), Y12, Y13
	VPMADDUBSW   Y13, Y10, Y13
	VPMADDWD     Y15, Y13, Y13
	VPADDD       Y13, Y2, Y2
	VPSIGNB      96(R12), Y12, Y13
	VPMADDUBSW   Y13, Y11, Y13
	VPMADDWD     Y15, Y13, Y13
	VPADDD       Y13, Y3, Y3
	VPBROADCASTD (R14), Y12
	VPSIGNB      (R12), Y12, Y13
	VPMADDUBSW   Y13, Y8, Y13
	VPMADDWD     Y15, Y13, Y13
	VPADDD       Y13, Y4, Y4
	VPSIGNB      32(R12), Y12, Y13
	VPMADDUBSW   Y13, Y9, Y13
	VPMADDWD     Y15, Y13, Y13
	VPADDD       Y13, Y5, Y5
	VPSIGNB      64(R12), Y12, Y13
	VPMADDUBSW   Y13, Y10, Y13
	VPMADDWD     Y15, Y13, Y13
	VPADDD       Y13, Y6, Y6
	VPSIGNB      96(R12), Y12, Y13
	VPMADDUBSW   Y13, Y11, Y13
	VPMADDWD     Y15, Y13, Y13
	VPADDD       Y13, Y7, Y7
	ADDQ         $128, SI
	ADDQ         $128, R12
	ADDQ         $4, R13
	ADDQ         $4, R14
	DECQ         CX
	JNZ          i8quad

	VBROADCASTSS -4(DI), Y12
	VCVTDQ2PS    Y0, Y0
	VMULPS       Y12, Y0, Y0
	VCVTDQ2PS    Y1, Y1
	VMULPS       Y12, Y1, Y1
	VCVTDQ2PS    Y2, Y2
	VMULPS       Y12, Y2, Y2
	VCVTDQ2PS    Y3, Y3
	VMULPS       Y12, Y3, Y3
	VBROADCASTSS -4(DI)(R8*1), Y13
	VCVTDQ2PS    Y4, Y4
	VMULPS       Y13, Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VMULPS       Y13, Y5, Y5
	VCVTDQ2PS    Y6, Y6
	VMULPS       Y13, Y6, Y6
	VCVTDQ2PS    Y7, Y7
	VMULPS       Y13, Y7, Y7
	VMAXPS       Y4, Y0, Y0
	VMAXPS       Y5, Y1, Y1
	VMAXPS       Y6, Y2, Y2
	VMAXPS       Y7, Y3, Y3
	VMAXPS       (DX), Y0, Y0
	VMAXPS       32(DX), Y1, Y1
	VMAXPS       64(DX), Y2, Y2
	VMAXPS       96(DX), Y3, Y3
	VMOVUPS      Y0, (DX)
	VMOVUPS      Y1, 32(DX)
	VMOVUPS      Y2, 64(DX)
	VMOVUPS      Y3, 96(DX)
	LEAQ         (DI)(R8*2), DI
	SUBQ         $2, R10
	JNZ          i8pair
	VZEROUPPER
	RET

// func listPairAVX512(slab, cent *int16, centStride int, pair *int16, blocks int, docs *uint32, slots *int32, nslots int, codes *byte, n, codeBytes int) (ok bool)
//
// Scores the n tokens of one centroid's code list (docnums at docs, codes
// of codeBytes bytes, a multiple of 4, at codes) over byte tables as
// residualPairAVX512 does, and for a token whose document has a slot
// s = slots[docnum] ≥ 0 sets each lane of slab row s (blocks × 32
// lanes) to the max of itself and the token's score. cent is the
// centroid's row of block 0; the next block's is centStride bytes on.
// Returns false, maybe after some rows were raised, on a docnum of
// nslots or more.
TEXT ·listPairAVX512(SB), NOSPLIT, $0-89
	MOVQ slab+0(FP), DX
	MOVQ cent+8(FP), BX
	MOVQ pair+24(FP), SI
	MOVQ blocks+32(FP), R15
	MOVQ slots+48(FP), R9
	MOVQ R15, R14
	SHLQ $6, R14

lblock:
	VMOVDQU16 0(BX), Z1
	MOVQ      docs+40(FP), R10
	MOVQ      n+72(FP), R11
	LEAQ      (R10)(R11*4), R11
	MOVQ      codes+64(FP), DI

lentry:
	CMPQ    R10, R11
	JAE     lnext
	MOVLQZX 0(R10), R13
	CMPQ    R13, nslots+56(FP)
	JAE     lbad
	MOVLQSX (R9)(R13*4), R13
	TESTQ   R13, R13
	JS      lskip
	IMULQ   R14, R13
	ADDQ    DX, R13
	VMOVDQA64 Z1, Z4
	VPXORD  Z5, Z5, Z5
	VPXORD  Z6, Z6, Z6
	VPXORD  Z7, Z7, Z7
	MOVQ    SI, R12
	MOVQ    codeBytes+80(FP), CX
	SHRQ    $2, CX

lbyte:
	MOVBQZX 0(DI), AX
	MOVBQZX 1(DI), R8
	SHLQ    $6, AX
	SHLQ    $6, R8
	VPADDW  0(R12)(AX*1), Z4, Z4
	VPADDW  16384(R12)(R8*1), Z5, Z5
	MOVBQZX 2(DI), AX
	MOVBQZX 3(DI), R8
	SHLQ    $6, AX
	SHLQ    $6, R8
	VPADDW  32768(R12)(AX*1), Z6, Z6
	VPADDW  49152(R12)(R8*1), Z7, Z7
	ADDQ    $65536, R12
	ADDQ    $4, DI
	DECQ    CX
	JNZ     lbyte

	VPADDW    Z5, Z4, Z4
	VPADDW    Z7, Z6, Z6
	VPADDW    Z6, Z4, Z4
	VPMAXSW   0(R13), Z4, Z4
	VMOVDQU16 Z4, 0(R13)
	ADDQ      $4, R10
	JMP       lentry

lskip:
	ADDQ codeBytes+80(FP), DI
	ADDQ $4, R10
	JMP  lentry

lnext:
	ADDQ $64, DX
	ADDQ centStride+16(FP), BX
	MOVQ codeBytes+80(FP), AX
	SHLQ $14, AX
	ADDQ AX, SI
	DECQ R15
	JNZ  lblock

	MOVB $1, ok+88(FP)
	VZEROUPPER
	RET

lbad:
	MOVB $0, ok+88(FP)
	VZEROUPPER
	RET

// func pairRowsAVX512(dst, lo, hi *int16)
//
// The 256 rows of one byte's table (32 lanes each): row h*16+l is the sum
// of lo's row l and hi's row h, lanes added with wrap-around (VPADDW).
TEXT ·pairRowsAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ lo+8(FP), SI
	MOVQ hi+16(FP), DX
	MOVQ $16, CX

prh:
	VMOVDQU16 (DX), Z0
	XORQ      AX, AX

prl:
	VPADDW    (SI)(AX*1), Z0, Z1
	VMOVDQU16 Z1, (DI)
	ADDQ      $64, DI
	ADDQ      $64, AX
	CMPQ      AX, $1024
	JLT       prl
	ADDQ      $64, DX
	DECQ      CX
	JNZ       prh
	VZEROUPPER
	RET

// func argmaxI8x32VNNI(qt *byte, rows *byte, n, dim int, corr *int32, scale *float32, best *float32, idx *int32, base int)
//
// For the 32 int8 tokens (lanes) laid out at qt as queryI8.lanes (q+128,
// unsigned) and the n int8 rows (a multiple of 8) of dim values (a
// multiple of 4) at rows, one after the other, with corr[j] = 128 * Σ
// row_j[k] and scale[j]: where scale[j] * float32(<q_l, row_j>) > best[l]
// (VCMPPS GT_OQ), rows taken in order, best[l] becomes that score and
// idx[l] base + j. So each lane ends with its best score and the lowest
// row among equal ones. VPDPBUSD sums (q_l[k] + 128) * row_j[k]; corr[j]
// takes the offset away, so the integer sum is <q_l, row_j> exactly, and
// the one rounding is its conversion and the multiplication by scale[j],
// as in argmaxI8Go.
TEXT ·argmaxI8x32VNNI(SB), NOSPLIT, $0-72
	MOVQ         qt+0(FP), R12
	MOVQ         rows+8(FP), DI
	MOVQ         n+16(FP), R13
	MOVQ         dim+24(FP), R8
	MOVQ         corr+32(FP), R14
	MOVQ         scale+40(FP), AX
	MOVQ         best+48(FP), DX
	MOVQ         idx+56(FP), R11
	VMOVUPS      (DX), Z26
	VMOVUPS      64(DX), Z27
	VMOVDQU32    (R11), Z28
	VMOVDQU32    64(R11), Z29
	VPBROADCASTD base+64(FP), Z30
	MOVL         $1, CX
	VPBROADCASTD CX, Z31
	SHRQ         $3, R13
	LEAQ         (R8)(R8*2), R9

ivgroup:
	MOVQ   R12, SI
	MOVQ   R8, CX
	SHRQ   $2, CX
	MOVQ   DI, BX
	LEAQ   (DI)(R8*4), R10
	ZERO16

ivloop:
	VNNI8x32
	DECQ          CX
	JNZ           ivloop

// I8SCALE takes row off/4's offset (corr, at R14) away from the int32
// lanes a and b, converts them to float32 and multiplies them by the
// row's scale (at AX).
#define I8SCALE(a, b, off) \
	VPBROADCASTD off(R14), Z18; \
	VPSUBD       Z18, a, a; \
	VPSUBD       Z18, b, b; \
	VCVTDQ2PS    a, a; \
	VCVTDQ2PS    b, b; \
	VBROADCASTSS off(AX), Z19; \
	VMULPS       Z19, a, a; \
	VMULPS       Z19, b, b

// I8ARG scales row off/4's lanes a and b (I8SCALE) and keeps each lane's
// best.
#define I8ARG(a, b, off) \
	I8SCALE(a, b, off); \
	VCMPPS       $0x1e, Z26, a, K1; \
	VCMPPS       $0x1e, Z27, b, K2; \
	VMOVAPS      a, K1, Z26; \
	VMOVAPS      b, K2, Z27; \
	VMOVDQA32    Z30, K1, Z28; \
	VMOVDQA32    Z30, K2, Z29; \
	VPADDD       Z31, Z30, Z30

	I8ARG(Z0, Z1, 0)
	I8ARG(Z2, Z3, 4)
	I8ARG(Z4, Z5, 8)
	I8ARG(Z6, Z7, 12)
	I8ARG(Z8, Z9, 16)
	I8ARG(Z10, Z11, 20)
	I8ARG(Z12, Z13, 24)
	I8ARG(Z14, Z15, 28)
	ADDQ $32, R14
	ADDQ $32, AX
	LEAQ (BX)(R8*8), DI
	DECQ R13
	JNZ  ivgroup

	VMOVUPS   Z26, (DX)
	VMOVUPS   Z27, 64(DX)
	VMOVDQU32 Z28, (R11)
	VMOVDQU32 Z29, 64(R11)
	VZEROUPPER
	RET

// func dotI8x32VNNI(qt *byte, rows *byte, n, dim int, corr *int32, scale *float32, qscale *float32, out *float32, stride int)
//
// For the 32 int8 tokens (lanes) laid out at qt as queryI8.lanes (q+128,
// unsigned), each with its scale qscale[l], and the n int8 rows (a
// multiple of 8) of dim values (a multiple of 4) at rows, one after the
// other, with corr[j] = 128 * Σ row_j[k] and scale[j]: out[j*stride + l] =
// float32(<q_l, row_j>) * scale[j] * qscale[l], for l < 16 with a stride
// of 16, l < 32 with a stride of at least 32. The integer sum is exact, as in argmaxI8x32VNNI; the roundings are
// its conversion and the two multiplications, in that order, as in
// dotI8Go.
TEXT ·dotI8x32VNNI(SB), NOSPLIT, $0-72
	MOVQ    qt+0(FP), R12
	MOVQ    rows+8(FP), DI
	MOVQ    n+16(FP), R13
	MOVQ    dim+24(FP), R8
	MOVQ    corr+32(FP), R14
	MOVQ    scale+40(FP), AX
	MOVQ    qscale+48(FP), DX
	MOVQ    out+56(FP), R11
	VMOVUPS (DX), Z26
	VMOVUPS 64(DX), Z27
	MOVQ    stride+64(FP), DX
	SHLQ    $2, DX
	SHRQ    $3, R13
	LEAQ    (R8)(R8*2), R9

dvgroup:
	MOVQ R12, SI
	MOVQ R8, CX
	SHRQ $2, CX
	MOVQ DI, BX
	LEAQ (DI)(R8*4), R10
	ZERO16

dvloop:
	VNNI8x32
	DECQ CX
	JNZ  dvloop

// I8DOT scales row off/4's lanes a and b (I8SCALE), then by the lanes'
// scales, and stores them at R11, the
// second half only for a stride of at least 32 (DX, 128 bytes); R11
// moves on a row.
#define I8DOT(a, b, off) \
	I8SCALE(a, b, off); \
	VMULPS       Z26, a, a; \
	VMULPS       Z27, b, b; \
	VMOVUPS      a, (R11); \
	CMPQ         DX, $128; \
	JLT          2(PC); \
	VMOVUPS      b, 64(R11); \
	ADDQ         DX, R11

	I8DOT(Z0, Z1, 0)
	I8DOT(Z2, Z3, 4)
	I8DOT(Z4, Z5, 8)
	I8DOT(Z6, Z7, 12)
	I8DOT(Z8, Z9, 16)
	I8DOT(Z10, Z11, 20)
	I8DOT(Z12, Z13, 24)
	I8DOT(Z14, Z15, 28)
	ADDQ $32, R14
	ADDQ $32, AX
	LEAQ (BX)(R8*8), DI
	DECQ R13
	JNZ  dvgroup

	VZEROUPPER
	RET

// Lanes 0 to 15, and the masks of the lanes below c, for topKAVX512.
DATA topkIota<>+0(SB)/4, $0
DATA topkIota<>+4(SB)/4, $1
DATA topkIota<>+8(SB)/4, $2
DATA topkIota<>+12(SB)/4, $3
DATA topkIota<>+16(SB)/4, $4
DATA topkIota<>+20(SB)/4, $5
DATA topkIota<>+24(SB)/4, $6
DATA topkIota<>+28(SB)/4, $7
DATA topkIota<>+32(SB)/4, $8
DATA topkIota<>+36(SB)/4, $9
DATA topkIota<>+40(SB)/4, $10
DATA topkIota<>+44(SB)/4, $11
DATA topkIota<>+48(SB)/4, $12
DATA topkIota<>+52(SB)/4, $13
DATA topkIota<>+56(SB)/4, $14
DATA topkIota<>+60(SB)/4, $15
GLOBL topkIota<>(SB), RODATA|NOPTR, $64

DATA topkBelow<>+0(SB)/4, $0x0000
DATA topkBelow<>+4(SB)/4, $0x0001
DATA topkBelow<>+8(SB)/4, $0x0003
DATA topkBelow<>+12(SB)/4, $0x0007
DATA topkBelow<>+16(SB)/4, $0x000f
DATA topkBelow<>+20(SB)/4, $0x001f
DATA topkBelow<>+24(SB)/4, $0x003f
DATA topkBelow<>+28(SB)/4, $0x007f
DATA topkBelow<>+32(SB)/4, $0x00ff
DATA topkBelow<>+36(SB)/4, $0x01ff
DATA topkBelow<>+40(SB)/4, $0x03ff
DATA topkBelow<>+44(SB)/4, $0x07ff
DATA topkBelow<>+48(SB)/4, $0x0fff
DATA topkBelow<>+52(SB)/4, $0x1fff
DATA topkBelow<>+56(SB)/4, $0x3fff
DATA topkBelow<>+60(SB)/4, $0x7fff
GLOBL topkBelow<>(SB), RODATA|NOPTR, $64

// func topKAVX512(row *float32, n, k int, out *int32, cv *float32, ci *int32) int
//
// topGroups with AVX-512: n values (a multiple of 16, n/k a multiple of
// 16). The floor is the least of the maxima of the k slices of n/k
// values; the values at or above it, at most 64, are compressed in row
// order into cv, their indices into ci (80 entries each: room for a
// whole vector past 64); each candidate's rank is the number of
// candidates greater than it plus the number equal to it before it, and
// a candidate of rank below k is written to out[rank]. Returns k, or 0
// (nothing written to out) when more than 64 values reach the floor.
TEXT ·topKAVX512(SB), NOSPLIT, $0-56
	MOVQ row+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ k+16(FP), R11
	MOVQ out+24(FP), DI
	MOVQ cv+32(FP), R8
	MOVQ ci+40(FP), R9

	// R12 = bytes a slice: n/k values.
	MOVQ CX, AX
	XORL DX, DX
	DIVQ R11
	MOVQ AX, R12
	SHLQ $2, R12

	// X0 = the floor, from +Inf.
	MOVL $0x7f800000, AX
	VMOVD AX, X0
	XORQ R13, R13
	MOVQ R11, R14

topkSlice:
	LEAQ (SI)(R13*1), BX
	VMOVUPS (BX), Z1
	MOVQ $64, R15

topkSliceMax:
	CMPQ R15, R12
	JGE  topkSliceDone
	VMAXPS (BX)(R15*1), Z1, Z1
	ADDQ $64, R15
	JMP  topkSliceMax

topkSliceDone:
	VEXTRACTF64X4 $1, Z1, Y2
	VMAXPS        Y2, Y1, Y1
	VEXTRACTF128  $1, Y1, X2
	VMAXPS        X2, X1, X1
	VPERMILPS     $0x4e, X1, X2
	VMAXPS        X2, X1, X1
	VPERMILPS     $0xb1, X1, X2
	VMAXPS        X2, X1, X1
	VMINSS        X1, X0, X0
	ADDQ          R12, R13
	DECQ          R14
	JNZ           topkSlice
	VBROADCASTSS  X0, Z0

	// The values at or above the floor, in row order.
	VMOVDQU32    topkIota<>(SB), Z3
	MOVL         $16, AX
	VPBROADCASTD AX, Z4
	MOVQ         CX, R15
	SHLQ         $2, R15
	XORQ         R13, R13
	XORQ         R14, R14

topkFilter:
	CMPQ        R13, R15
	JGE         topkFiltered
	VMOVUPS     (SI)(R13*1), Z1
	VCMPPS      $0x1d, Z0, Z1, K1
	KMOVW       K1, AX
	POPCNTL     AX, AX
	LEAQ        (R14)(AX*1), BX
	CMPQ        BX, $64
	JGT         topkBail
	VCOMPRESSPS Z1, K1, Z5
	VMOVUPS     Z5, (R8)(R14*4)
	VPCOMPRESSD Z3, K1, Z6
	VMOVDQU32   Z6, (R9)(R14*4)
	MOVQ        BX, R14
	VPADDD      Z4, Z3, Z3
	ADDQ        $64, R13
	JMP         topkFilter

topkFiltered:
	// Past the m = R14 candidates, -Inf, which is greater than none.
	MOVL         $0xff800000, AX
	VPBROADCASTD AX, Z5
	VMOVUPS      Z5, (R8)(R14*4)
	// R12 = bytes of the candidates' whole vectors.
	LEAQ         15(R14), R12
	ANDQ         $-16, R12
	SHLQ         $2, R12
	XORQ         R13, R13

topkRank:
	CMPQ         R13, R14
	JGE          topkDone
	VBROADCASTSS (R8)(R13*4), Z1
	XORQ         BX, BX
	XORQ         R15, R15
	MOVQ         R13, R10

topkBlock:
	CMPQ    R15, R12
	JGE     topkRanked
	VMOVUPS (R8)(R15*1), Z2
	VCMPPS  $0x1e, Z1, Z2, K2
	KMOVW   K2, AX
	POPCNTL AX, AX
	ADDQ    AX, BX
	// Equal ones count before i only: the lanes below c = i - 16·block.
	TESTQ   R10, R10
	JLE     topkNext
	VCMPPS  $0x00, Z1, Z2, K3
	KMOVW   K3, AX
	CMPQ    R10, $16
	JGE     topkAll
	LEAQ    topkBelow<>(SB), DX
	ANDL    (DX)(R10*4), AX

topkAll:
	POPCNTL AX, AX
	ADDQ    AX, BX

topkNext:
	SUBQ $16, R10
	ADDQ $64, R15
	JMP  topkBlock

topkRanked:
	CMPQ BX, R11
	JGE  topkSkip
	MOVL (R9)(R13*4), AX
	MOVL AX, (DI)(BX*4)

topkSkip:
	INCQ R13
	JMP  topkRank

topkDone:
	VZEROUPPER
	MOVQ R11, ret+48(FP)
	RET

topkBail:
	VZEROUPPER
	MOVQ $0, ret+48(FP)
	RET

// func rowsAbove8AVX2(p *float32, stride, rows int, thr *[8]float32, out *int32) int
// For each row r < rows of 8 values at p + 4*stride*r bytes: out[count] = r,
// and count grows when some value v[j] >= thr[j] (VCMPPS LE_OS: thr <= v,
// false for NaN). Writes out[count] for every row, so out holds rows values.
TEXT ·rowsAbove8AVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), BX
	SHLQ $2, BX
	MOVQ rows+16(FP), CX
	MOVQ thr+24(FP), DX
	MOVQ out+32(FP), DI
	VMOVUPS (DX), Y1
	XORQ AX, AX
	XORQ R8, R8
aboveloop:
	VCMPPS $0x02, (SI), Y1, Y0
	VMOVMSKPS Y0, R9
	MOVL AX, (DI)(R8*4)
	XORL R10, R10
	TESTL R9, R9
	SETNE R10B
	ADDQ R10, R8
	ADDQ BX, SI
	INCQ AX
	CMPQ AX, CX
	JLT aboveloop
	VZEROUPPER
	MOVQ R8, ret+40(FP)
	RET

// func maxRows8AVX2(p *float32, stride int, rows *uint16, n int, best *[8]float32)
// best[j] = max(best[j], p[rows[i]*stride+j]) over i < n, for j < 8.
TEXT ·maxRows8AVX2(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), BX
	SHLQ $2, BX
	MOVQ rows+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ best+32(FP), DI
	VMOVUPS (DI), Y0
	VMOVAPS Y0, Y1
	TESTQ CX, CX
	JEQ maxrowsdone
	SUBQ $2, CX
	JLT maxrowslast
maxrowsloop:
	MOVWQZX (DX), AX
	MOVWQZX 2(DX), R8
	IMULQ BX, AX
	IMULQ BX, R8
	VMAXPS (SI)(AX*1), Y0, Y0
	VMAXPS (SI)(R8*1), Y1, Y1
	ADDQ $4, DX
	SUBQ $2, CX
	JGE maxrowsloop
maxrowslast:
	ADDQ $2, CX
	JEQ maxrowsdone
	MOVWQZX (DX), AX
	IMULQ BX, AX
	VMAXPS (SI)(AX*1), Y0, Y0
maxrowsdone:
	VMAXPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET
