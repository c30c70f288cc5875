#include "textflag.h"

// Every body walks 128 bytes (four 256-bit registers) per iteration.
// For the binary kernels the destination's value is the first source
// operand, as in the scalar loop's ADDSS/DIVSS, so results, NaN payloads
// included, are the scalar loop's bits.

// BINARY(OP): DI[i] = DI[i] OP SI[i] for CX bytes.
#define BINARY(OP) \
loop: \
	VMOVUPS 0(DI), Y0 \
	VMOVUPS 32(DI), Y1 \
	VMOVUPS 64(DI), Y2 \
	VMOVUPS 96(DI), Y3 \
	OP 0(SI), Y0, Y0 \
	OP 32(SI), Y1, Y1 \
	OP 64(SI), Y2, Y2 \
	OP 96(SI), Y3, Y3 \
	VMOVUPS Y0, 0(DI) \
	VMOVUPS Y1, 32(DI) \
	VMOVUPS Y2, 64(DI) \
	VMOVUPS Y3, 96(DI) \
	ADDQ $128, DI \
	ADDQ $128, SI \
	SUBQ $128, CX \
	JNZ loop \
	VZEROUPPER \
	RET

// SUM3(OP): DI[i] = ((DI[i] OP SI[i]) OP DX[i]) OP BX[i] for CX bytes.
#define SUM3(OP) \
loop: \
	VMOVUPS 0(DI), Y0 \
	VMOVUPS 32(DI), Y1 \
	VMOVUPS 64(DI), Y2 \
	VMOVUPS 96(DI), Y3 \
	OP 0(SI), Y0, Y0 \
	OP 32(SI), Y1, Y1 \
	OP 64(SI), Y2, Y2 \
	OP 96(SI), Y3, Y3 \
	OP 0(DX), Y0, Y0 \
	OP 32(DX), Y1, Y1 \
	OP 64(DX), Y2, Y2 \
	OP 96(DX), Y3, Y3 \
	OP 0(BX), Y0, Y0 \
	OP 32(BX), Y1, Y1 \
	OP 64(BX), Y2, Y2 \
	OP 96(BX), Y3, Y3 \
	VMOVUPS Y0, 0(DI) \
	VMOVUPS Y1, 32(DI) \
	VMOVUPS Y2, 64(DI) \
	VMOVUPS Y3, 96(DI) \
	ADDQ $128, DI \
	ADDQ $128, SI \
	ADDQ $128, DX \
	ADDQ $128, BX \
	SUBQ $128, CX \
	JNZ loop \
	VZEROUPPER \
	RET

// SCALAR(OP): DI[i] = DI[i] OP Y4 (a broadcast scalar) for CX bytes.
#define SCALAR(OP) \
loop: \
	VMOVUPS 0(DI), Y0 \
	VMOVUPS 32(DI), Y1 \
	VMOVUPS 64(DI), Y2 \
	VMOVUPS 96(DI), Y3 \
	OP Y4, Y0, Y0 \
	OP Y4, Y1, Y1 \
	OP Y4, Y2, Y2 \
	OP Y4, Y3, Y3 \
	VMOVUPS Y0, 0(DI) \
	VMOVUPS Y1, 32(DI) \
	VMOVUPS Y2, 64(DI) \
	VMOVUPS Y3, 96(DI) \
	ADDQ $128, DI \
	SUBQ $128, CX \
	JNZ loop \
	VZEROUPPER \
	RET

// func addF32AVX(dst, src *float32, n int)
TEXT ·addF32AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	BINARY(VADDPS)

// func addF64AVX(dst, src *float64, n int)
TEXT ·addF64AVX(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHLQ $3, CX
	BINARY(VADDPD)

// func sum3F32AVX(a, x, y, z *float32, n int)
TEXT ·sum3F32AVX(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ z+24(FP), BX
	MOVQ n+32(FP), CX
	SHLQ $2, CX
	SUM3(VADDPS)

// func sum3F64AVX(a, x, y, z *float64, n int)
TEXT ·sum3F64AVX(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ z+24(FP), BX
	MOVQ n+32(FP), CX
	SHLQ $3, CX
	SUM3(VADDPD)

// func mulF32AVX(s *float32, f float32, n int)
TEXT ·mulF32AVX(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), DI
	VBROADCASTSS f+8(FP), Y4
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	SCALAR(VMULPS)

// func mulF64AVX(s *float64, f float64, n int)
TEXT ·mulF64AVX(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), DI
	VBROADCASTSD f+8(FP), Y4
	MOVQ n+16(FP), CX
	SHLQ $3, CX
	SCALAR(VMULPD)

// func divF32AVX(s *float32, d float32, n int)
TEXT ·divF32AVX(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), DI
	VBROADCASTSS d+8(FP), Y4
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	SCALAR(VDIVPS)

// func divF64AVX(s *float64, d float64, n int)
TEXT ·divF64AVX(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), DI
	VBROADCASTSD d+8(FP), Y4
	MOVQ n+16(FP), CX
	SHLQ $3, CX
	SCALAR(VDIVPD)

// func hasF16C() bool
TEXT ·hasF16C(SB), NOSPLIT, $0-1
	MOVL $1, AX
	XORL CX, CX
	CPUID
	SHRL $29, CX
	ANDL $1, CX
	MOVB CX, ret+0(FP)
	RET

// NANEXIT(Y): leave the loop, at label done, if any lane of Y is NaN.
#define NANEXIT(Y) \
	VCMPPS $3, Y, Y, Y7 \
	VMOVMSKPS Y7, DX \
	TESTL DX, DX \
	JNZ done

// func f32ToF16F16C(dst *uint16, src *float32, n int) int
TEXT ·f32ToF16F16C(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
loop:
	VMOVUPS (SI), Y0
	NANEXIT(Y0)
	VCVTPS2PH $0, Y0, X1 // imm 0: round to nearest even, whatever MXCSR says
	VMOVDQU X1, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	ADDQ $8, AX
	CMPQ AX, CX
	JLT loop
done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

// func f32ToBF16AVX2(dst *uint16, src *float32, n int) int
// Per lane, as the scalar code: (u + 0x7fff + (u>>16)&1) >> 16.
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	MOVL $0x7fff, DX
	VMOVD DX, X5
	VPBROADCASTD X5, Y5
	MOVL $1, DX
	VMOVD DX, X6
	VPBROADCASTD X6, Y6
loop:
	VMOVDQU (SI), Y0
	NANEXIT(Y0)
	VPSRLD $16, Y0, Y1
	VPAND Y6, Y1, Y1
	VPADDD Y5, Y0, Y0
	VPADDD Y1, Y0, Y0
	VPSRLD $16, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSDW X1, X0, X0 // lanes 0-3 from X0, 4-7 from X1; every value fits in 16 bits
	VMOVDQU X0, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	ADDQ $8, AX
	CMPQ AX, CX
	JLT loop
done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

// func f16ToF32F16C(dst *float32, src *uint16, n int) int
TEXT ·f16ToF32F16C(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
loop:
	VCVTPH2PS (SI), Y0
	NANEXIT(Y0)
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	ADDQ $8, AX
	CMPQ AX, CX
	JLT loop
done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET

// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
loop:
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ loop
	VZEROUPPER
	RET
