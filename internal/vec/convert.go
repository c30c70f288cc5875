package vec

// F64ToF32 sets dst[i] = float32(src[i]): each value rounded to nearest,
// ties to even, as Go's conversion rounds it (the vector body's VCVTPD2PS
// and the scalar loop's CVTSD2SS round and quiet NaNs alike).
func F64ToF32(dst []float32, src []float64) {
	checkLen(len(dst), len(src))
	n := prefix(len(dst), stride64)
	if n > 0 {
		f64ToF32AVX(&dst[0], &src[0], n)
	}
	f64ToF32(dst[n:], src[n:])
}

func f64ToF32(dst []float32, src []float64) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = float32(x)
	}
}
