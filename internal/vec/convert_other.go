//go:build !amd64

package vec

func f64ToF32AVX(dst *float32, src *float64, n int) { panic("vec: no vector body") }
