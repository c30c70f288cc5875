package kernel

import "github.com/goddp/ddp/pg"

// The half-precision conversions are pg's (pg/convert.go); the kernel
// names them here for its loops, and its tests check them exhaustively.

// F16ToF32 converts an IEEE 754 binary16 bit pattern to float32 exactly.
func F16ToF32(h uint16) float32 { return pg.F16ToF32(h) }

// F32ToF16 converts f to binary16, rounding to nearest even.
func F32ToF16(f float32) uint16 { return pg.F32ToF16(f) }

// BF16ToF32 converts a bfloat16 bit pattern to float32 exactly.
func BF16ToF32(h uint16) float32 { return pg.BF16ToF32(h) }

// F32ToBF16 converts f to bfloat16, rounding to nearest even.
func F32ToBF16(f float32) uint16 { return pg.F32ToBF16(f) }
