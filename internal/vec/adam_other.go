//go:build !amd64

package vec

func adamF32AVX(p, grad, m, v *float32, n int, w1, beta2, w2, bc2Sqrt, eps, negStep float32) {
	panic("vec: no vector body")
}

func adamF64AVX(p, grad, m, v *float64, n int, w1, beta2, w2, bc2Sqrt, eps, negStep float64) {
	panic("vec: no vector body")
}
