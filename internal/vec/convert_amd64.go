package vec

// f64ToF32AVX converts n elements, a positive multiple of stride64.
//
//go:noescape
func f64ToF32AVX(dst *float32, src *float64, n int)
