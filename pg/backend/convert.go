package backend

import (
	"fmt"
	"math"

	"github.com/goddp/ddp/internal/vec"
	"github.com/goddp/ddp/pg"
)

// Conversions between the floating-point dtypes, rounding as c10's casts
// do: to nearest, ties to even; too large becomes ±Inf; NaN stays a
// (quiet) NaN. float64 goes to float16 or bfloat16 through float32, as
// c10::Half and c10::BFloat16 are built from a float, so such a cast can
// round twice, exactly as torch's .to(torch.float16) does on a float64
// tensor. Widening is exact.
//
// These are the conversions the process groups reduce half-precision
// tensors with (pg/internal/kernel calls them), exported for comm hooks
// that compress.

// F16ToF32 converts an IEEE 754 binary16 bit pattern to float32, exactly.
func F16ToF32(h uint16) float32 {
	const expMask = 0x7c00 << 13
	u := uint32(h&0x7fff) << 13 // exponent and mantissa in float32's place
	switch u & expMask {
	case expMask: // Inf or NaN: the float32 exponent is all ones too
		u += (255 - 31) << 23
	case 0: // zero or subnormal: renormalise with one exact float subtraction
		u += 113 << 23
		u = math.Float32bits(math.Float32frombits(u) - math.Float32frombits(113<<23))
	default:
		u += (127 - 15) << 23
	}
	return math.Float32frombits(u | uint32(h&0x8000)<<16)
}

// F32ToF16 converts f to binary16, rounding to nearest even.
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	if h, ok := f16Normal(u); ok {
		return h
	}
	return uint16(u>>16)&0x8000 | f32ToF16Rare(u&0x7fffffff)
}

// f16Normal converts the float32 bits u when the result is a normal
// binary16, |f| in [2^-14, 65520), and reports whether it was: rebias
// the exponent, add half an ulp less one plus the lowest kept bit (ties
// to even), drop 13 bits. A carry out of the mantissa moves into the
// exponent, up to Inf: that is right. It is small enough to inline into
// the conversion loops.
func f16Normal(u uint32) (uint16, bool) {
	a := u & 0x7fffffff
	if a-113<<23 >= (143-113)<<23 {
		return 0, false
	}
	a -= (127 - 15) << 23
	return uint16(u>>16)&0x8000 | uint16((a+0xfff+(a>>13)&1)>>13), true
}

// f32ToF16Rare converts |f| (bits a) outside binary16's normal range.
func f32ToF16Rare(a uint32) uint16 {
	const (
		f32Inf = 255 << 23
		// magic is 0.5, the float32 whose last mantissa bit is binary16's
		// smallest subnormal (2^-24): adding it lets the FPU round the
		// value to a subnormal (or zero) for us.
		magic = (127 - 1) << 23
	)
	switch {
	case a > f32Inf:
		return 0x7e00 // NaN, quiet
	case a >= 143<<23: // 65536 and up: Inf
		return 0x7c00
	}
	return uint16(math.Float32bits(math.Float32frombits(a)+math.Float32frombits(magic)) - magic)
}

// BF16ToF32 converts a bfloat16 bit pattern to float32, exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts f to bfloat16, rounding to nearest even.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40 // NaN: keep the sign and payload's top, quiet
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// Convert writes src's elements into dst, converted to dst's dtype. Both
// must be floating-point tensors of the same length; they must not
// overlap unless they are the same tensor.
func Convert(dst, src pg.Tensor) error {
	if !dst.Dtype.IsFloat() || !src.Dtype.IsFloat() {
		return fmt.Errorf("%w: convert %v to %v: both must be floating point", pg.ErrInvalidArgument, src.Dtype, dst.Dtype)
	}
	if dst.Len() != src.Len() {
		return fmt.Errorf("%w: convert %d %v elements into %d", pg.ErrInvalidArgument, src.Len(), src.Dtype, dst.Len())
	}
	switch src.Dtype {
	case dst.Dtype:
		copy(dst.Data, src.Data)
	case pg.Float32:
		switch dst.Dtype {
		case pg.Float16:
			vec.F32ToF16(pg.View[uint16](dst), pg.View[float32](src), F32ToF16)
		case pg.BFloat16:
			vec.F32ToBF16(pg.View[uint16](dst), pg.View[float32](src), F32ToBF16)
		default:
			fromFloat(dst, pg.View[float32](src))
		}
	case pg.Float64:
		fromFloat(dst, pg.View[float64](src))
	case pg.Float16:
		fromHalf(dst, pg.View[uint16](src), pg.Float16)
	case pg.BFloat16:
		fromHalf(dst, pg.View[uint16](src), pg.BFloat16)
	}
	return nil
}

func fromFloat[S float32 | float64](dst pg.Tensor, s []S) {
	switch dst.Dtype {
	case pg.Float32:
		d := pg.View[float32](dst)
		for i, v := range s {
			d[i] = float32(v)
		}
	case pg.Float64:
		d := pg.View[float64](dst)
		for i, v := range s {
			d[i] = float64(v)
		}
	case pg.Float16:
		d := pg.View[uint16](dst)
		for i, v := range s {
			if h, ok := f16Normal(math.Float32bits(float32(v))); ok {
				d[i] = h
			} else {
				d[i] = F32ToF16(float32(v))
			}
		}
	case pg.BFloat16:
		d := pg.View[uint16](dst)
		for i, v := range s {
			d[i] = F32ToBF16(float32(v))
		}
	}
}

func fromHalf(dst pg.Tensor, s []uint16, src pg.Dtype) {
	widen := F16ToF32
	if src == pg.BFloat16 {
		widen = BF16ToF32
	}
	switch dst.Dtype {
	case pg.Float32:
		d := pg.View[float32](dst)
		if src == pg.BFloat16 {
			vec.BF16ToF32(d, s)
		} else {
			vec.F16ToF32(d, s, F16ToF32)
		}
	case pg.Float64:
		d := pg.View[float64](dst)
		for i, v := range s {
			d[i] = float64(widen(v))
		}
	case pg.Float16:
		d := pg.View[uint16](dst)
		for i, v := range s {
			d[i] = F32ToF16(widen(v))
		}
	case pg.BFloat16:
		d := pg.View[uint16](dst)
		for i, v := range s {
			d[i] = F32ToBF16(widen(v))
		}
	}
}
