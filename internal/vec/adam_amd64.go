package vec

// The Adam bodies, in adam_amd64.s. n is a positive multiple of the
// stride (strideAdam32 or strideAdam64) and every pointer addresses at
// least n elements.

//go:noescape
func adamF32AVX(p, grad, m, v *float32, n int, w1, beta2, w2, bc2Sqrt, eps, negStep float32)

//go:noescape
func adamF64AVX(p, grad, m, v *float64, n int, w1, beta2, w2, bc2Sqrt, eps, negStep float64)
