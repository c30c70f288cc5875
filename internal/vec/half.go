package vec

// Conversions between float32 and the 16-bit floats, eight elements at a
// time with F16C and AVX2 where the CPU has them.
//
// The hardware rounds as the scalar code does (to nearest even, keeping
// subnormals, overflowing to infinity), but its NaNs differ: F16C keeps a
// NaN's payload and quiets signalling NaNs, where the scalar code (like
// torch's) turns every float32 NaN into the canonical half NaN and keeps a
// half's payload as it is. So the vector bodies stop at a group of eight
// that holds a NaN, and the caller's scalar conversion does that group:
// the results are the scalar code's bits, NaNs included, and NaN-free data
// never leaves the vector path.

const halfStride = 8 // elements per vector step

// F32ToF16 sets dst[i] to src[i] rounded to binary16. scalar must be the
// exact conversion of one element; it does the tail and groups with NaNs.
func F32ToF16(dst []uint16, src []float32, scalar func(float32) uint16) {
	convert(dst, src, scalar, f32ToF16F16C)
}

// F32ToBF16 sets dst[i] to src[i] rounded to bfloat16; scalar as for
// F32ToF16.
func F32ToBF16(dst []uint16, src []float32, scalar func(float32) uint16) {
	convert(dst, src, scalar, f32ToBF16AVX2)
}

// F16ToF32 sets dst[i] to the binary16 src[i], exactly; scalar does the
// tail and groups with NaNs.
func F16ToF32(dst []float32, src []uint16, scalar func(uint16) float32) {
	convert(dst, src, scalar, f16ToF32F16C)
}

// BF16ToF32 sets dst[i] to the bfloat16 src[i], exactly: its bits in the
// top half of a float32, NaN payloads included.
func BF16ToF32(dst []float32, src []uint16) {
	checkLen(len(dst), len(src))
	n := 0
	if useF16C {
		n = len(src) / halfStride * halfStride
	}
	if n > 0 {
		bf16ToF32AVX2(&dst[0], &src[0], n)
	}
	for i := n; i < len(src); i++ {
		dst[i] = bf16Bits(src[i])
	}
}

// convert runs body over the whole groups of eight, and scalar over each
// group body stops at (one holding a NaN) and over the tail.
func convert[D, S any](dst []D, src []S, scalar func(S) D, body func(*D, *S, int) int) {
	checkLen(len(dst), len(src))
	i := 0
	if useF16C {
		full := len(src) / halfStride * halfStride
		for i < full {
			i += body(&dst[i], &src[i], full-i)
			if i < full { // the group at i holds a NaN
				for end := i + halfStride; i < end; i++ {
					dst[i] = scalar(src[i])
				}
			}
		}
	}
	for ; i < len(src); i++ {
		dst[i] = scalar(src[i])
	}
}
