package vec

import "math"

// FiniteF32 reports whether no element of s is an infinity or a NaN.
func FiniteF32(s []float32) bool {
	n := prefix(len(s), stride32)
	if n > 0 && !finiteF32AVX(&s[0], n) {
		return false
	}
	for _, x := range s[n:] {
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			return false
		}
	}
	return true
}

// FiniteF64 reports whether no element of s is an infinity or a NaN.
func FiniteF64(s []float64) bool {
	n := prefix(len(s), stride64)
	if n > 0 && !finiteF64AVX(&s[0], n) {
		return false
	}
	for _, x := range s[n:] {
		if math.Float64bits(x)&0x7ff0000000000000 == 0x7ff0000000000000 {
			return false
		}
	}
	return true
}
