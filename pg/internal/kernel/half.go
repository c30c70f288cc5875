package kernel

import (
	"github.com/goddp/ddp/internal/vec"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// The half-precision conversions are pg/backend's (convert.go); the kernel
// names them here for its loops, and its tests check them exhaustively.

// F16ToF32 converts an IEEE 754 binary16 bit pattern to float32 exactly.
func F16ToF32(h uint16) float32 { return backend.F16ToF32(h) }

// F32ToF16 converts f to binary16, rounding to nearest even.
func F32ToF16(f float32) uint16 { return backend.F32ToF16(f) }

// BF16ToF32 converts a bfloat16 bit pattern to float32 exactly.
func BF16ToF32(h uint16) float32 { return backend.BF16ToF32(h) }

// F32ToBF16 converts f to bfloat16, rounding to nearest even.
func F32ToBF16(f float32) uint16 { return backend.F32ToBF16(f) }

// halfCodec converts blocks of one 16-bit float dtype to float32 and back,
// with the vector conversions (bit for bit the scalar ones above).
type halfCodec struct {
	widen  func(dst []float32, src []uint16)
	narrow func(dst []uint16, src []float32)
}

func codecOf(d pg.Dtype) halfCodec {
	if d == pg.BFloat16 {
		return halfCodec{vec.BF16ToF32, narrowBF16}
	}
	return halfCodec{widenF16, narrowF16}
}

func widenF16(dst []float32, src []uint16)   { vec.F16ToF32(dst, src, F16ToF32) }
func narrowF16(dst []uint16, src []float32)  { vec.F32ToF16(dst, src, F32ToF16) }
func narrowBF16(dst []uint16, src []float32) { vec.F32ToBF16(dst, src, F32ToBF16) }
