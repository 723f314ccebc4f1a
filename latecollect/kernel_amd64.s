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
