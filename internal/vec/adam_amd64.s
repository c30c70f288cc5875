#include "textflag.h"

// One Adam step, 64 bytes (two 256-bit registers) per iteration. Each
// instruction's first source operand is the left operand of the scalar
// loop's expression (adam.go), so every lane rounds as the loop does.
// Registers: DI p, SI g, DX m, BX v, CX bytes left; Y10 W1, Y11 Beta2,
// Y12 W2, Y13 BC2Sqrt, Y14 Eps, Y15 NegStep.

// ADAMPS(off, rg, rm, rv, rt) and ADAMPD: one register's lanes at byte
// offset off, in float32 and float64.
#define ADAMPS(off, rg, rm, rv, rt) \
	VMOVUPS off(SI), rg \
	VMOVUPS off(DX), rm \
	VSUBPS rm, rg, rt \
	VMULPS rt, Y10, rt \
	VADDPS rt, rm, rm \
	VMOVUPS rm, off(DX) \
	VMOVUPS off(BX), rv \
	VMULPS Y11, rv, rv \
	VMULPS rg, Y12, rt \
	VMULPS rg, rt, rt \
	VADDPS rt, rv, rv \
	VMOVUPS rv, off(BX) \
	VSQRTPS rv, rt \
	VDIVPS Y13, rt, rt \
	VADDPS Y14, rt, rt \
	VMULPS rm, Y15, rm \
	VDIVPS rt, rm, rm \
	VMOVUPS off(DI), rg \
	VADDPS rm, rg, rg \
	VMOVUPS rg, off(DI)

#define ADAMPD(off, rg, rm, rv, rt) \
	VMOVUPS off(SI), rg \
	VMOVUPS off(DX), rm \
	VSUBPD rm, rg, rt \
	VMULPD rt, Y10, rt \
	VADDPD rt, rm, rm \
	VMOVUPS rm, off(DX) \
	VMOVUPS off(BX), rv \
	VMULPD Y11, rv, rv \
	VMULPD rg, Y12, rt \
	VMULPD rg, rt, rt \
	VADDPD rt, rv, rv \
	VMOVUPS rv, off(BX) \
	VSQRTPD rv, rt \
	VDIVPD Y13, rt, rt \
	VADDPD Y14, rt, rt \
	VMULPD rm, Y15, rm \
	VDIVPD rt, rm, rm \
	VMOVUPS off(DI), rg \
	VADDPD rm, rg, rg \
	VMOVUPS rg, off(DI)

// ADAMNEXT: advance the pointers past one iteration, and loop.
#define ADAMNEXT \
	ADDQ $64, DI \
	ADDQ $64, SI \
	ADDQ $64, DX \
	ADDQ $64, BX \
	SUBQ $64, CX \
	JNZ loop \
	VZEROUPPER \
	RET

// func adamF32AVX(p, grad, m, v *float32, n int, w1, beta2, w2, bc2Sqrt, eps, negStep float32)
TEXT ·adamF32AVX(SB), NOSPLIT, $0-64
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), BX
	MOVQ n+32(FP), CX
	SHLQ $2, CX
	VBROADCASTSS w1+40(FP), Y10
	VBROADCASTSS beta2+44(FP), Y11
	VBROADCASTSS w2+48(FP), Y12
	VBROADCASTSS bc2Sqrt+52(FP), Y13
	VBROADCASTSS eps+56(FP), Y14
	VBROADCASTSS negStep+60(FP), Y15
loop:
	ADAMPS(0, Y0, Y1, Y2, Y3)
	ADAMPS(32, Y4, Y5, Y6, Y7)
	ADAMNEXT

// func adamF64AVX(p, grad, m, v *float64, n int, w1, beta2, w2, bc2Sqrt, eps, negStep float64)
TEXT ·adamF64AVX(SB), NOSPLIT, $0-88
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), BX
	MOVQ n+32(FP), CX
	SHLQ $3, CX
	VBROADCASTSD w1+40(FP), Y10
	VBROADCASTSD beta2+48(FP), Y11
	VBROADCASTSD w2+56(FP), Y12
	VBROADCASTSD bc2Sqrt+64(FP), Y13
	VBROADCASTSD eps+72(FP), Y14
	VBROADCASTSD negStep+80(FP), Y15
loop:
	ADAMPD(0, Y0, Y1, Y2, Y3)
	ADAMPD(32, Y4, Y5, Y6, Y7)
	ADAMNEXT
