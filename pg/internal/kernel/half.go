package kernel

import "math"

// F16ToF32 converts an IEEE 754 binary16 bit pattern to float32 exactly.
// (F. Giesen's branch-light conversion.)
func F16ToF32(h uint16) float32 {
	const shiftedExp = 0x7c00 << 13
	u := uint32(h&0x7fff) << 13
	exp := u & shiftedExp
	u += (127 - 15) << 23
	switch exp {
	case shiftedExp: // Inf or NaN
		u += (128 - 16) << 23
	case 0: // zero or subnormal: renormalise with a float subtraction
		u += 1 << 23
		u = math.Float32bits(math.Float32frombits(u) - math.Float32frombits(113<<23))
	}
	return math.Float32frombits(u | uint32(h&0x8000)<<16)
}

// F32ToF16 converts f to binary16, rounding to nearest even. Values too
// large become ±Inf and NaNs stay NaN (quiet).
func F32ToF16(f float32) uint16 {
	const (
		f32Inf      = 255 << 23
		f16Max      = (127 + 16) << 23
		denormMagic = ((127 - 15) + (23 - 10) + 1) << 23
	)
	u := math.Float32bits(f)
	sign := u & 0x80000000
	u ^= sign
	var o uint32
	switch {
	case u >= f16Max:
		o = 0x7c00
		if u > f32Inf {
			o = 0x7e00
		}
	case u < 113<<23: // the result is subnormal or zero: let float addition round
		o = math.Float32bits(math.Float32frombits(u)+math.Float32frombits(denormMagic)) - denormMagic
	default:
		odd := (u >> 13) & 1
		u += 0xC8000000 + 0xfff // rebias the exponent by 15-127, plus the rounding bias
		u += odd
		o = u >> 13
	}
	return uint16(o | sign>>16)
}

// BF16ToF32 converts a bfloat16 bit pattern to float32 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts f to bfloat16, rounding to nearest even. NaNs stay
// NaN (quiet).
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}
