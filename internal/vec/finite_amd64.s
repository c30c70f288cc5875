#include "textflag.h"

// An element's exponent bits alone (x & expMask, mantissa and sign
// cleared) read as a float are +Inf exactly when the element is an
// infinity or a NaN, and a smaller non-negative value otherwise, never a
// NaN. So the running maximum of those values, four registers of it, is
// +Inf exactly when some element is not finite. Floating-point logic and
// maxima are AVX (no AVX2), and no subnormal ever reaches an arithmetic
// unit (its exponent bits are zero).

DATA expMask32<>+0(SB)/4, $0x7f800000
GLOBL expMask32<>(SB), RODATA|NOPTR, $4

DATA expMask64<>+0(SB)/8, $0x7ff0000000000000
GLOBL expMask64<>(SB), RODATA|NOPTR, $8

// FINITE(AND, MAX): the loop over CX bytes at SI, Y15 holding the mask;
// leaves the maximum in Y4.
#define FINITE(AND, MAX) \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
loop: \
	AND 0(SI), Y15, Y0 \
	AND 32(SI), Y15, Y1 \
	AND 64(SI), Y15, Y2 \
	AND 96(SI), Y15, Y3 \
	MAX Y0, Y4, Y4 \
	MAX Y1, Y5, Y5 \
	MAX Y2, Y6, Y6 \
	MAX Y3, Y7, Y7 \
	ADDQ $128, SI \
	SUBQ $128, CX \
	JNZ loop \
	MAX Y5, Y4, Y4 \
	MAX Y7, Y6, Y6 \
	MAX Y6, Y4, Y4

// func finiteF32AVX(s *float32, n int) bool
TEXT ·finiteF32AVX(SB), NOSPLIT, $0-17
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	SHLQ $2, CX
	VBROADCASTSS expMask32<>(SB), Y15
	FINITE(VANDPS, VMAXPS)
	VCMPPS $0, Y15, Y4, Y4
	VMOVMSKPS Y4, AX
	TESTL AX, AX
	SETEQ ret+16(FP)
	VZEROUPPER
	RET

// func finiteF64AVX(s *float64, n int) bool
TEXT ·finiteF64AVX(SB), NOSPLIT, $0-17
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	SHLQ $3, CX
	VBROADCASTSD expMask64<>(SB), Y15
	FINITE(VANDPD, VMAXPD)
	VCMPPD $0, Y15, Y4, Y4
	VMOVMSKPD Y4, AX
	TESTL AX, AX
	SETEQ ret+16(FP)
	VZEROUPPER
	RET
