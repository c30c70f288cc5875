//go:build !amd64

package gemm

// Without the kernels every product runs the portable loops.
const useFMA = false

func tileF32(a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, k, rows int, mask *int32,
	alpha, beta float32, betaZero bool) {
	panic("gemm: no vector kernel")
}

func tileF64(a *float64, rs, cs int, b *float64, ldb int, c *float64, ldc int, k, rows int, mask *int32,
	alpha, beta float64, betaZero bool) {
	panic("gemm: no vector kernel")
}

func dotF32(a *float32, lda int, b *float32, ldb int, vecs, rows, cols int, mask *int32, out *float32) {
	panic("gemm: no vector kernel")
}

func dotF64(a *float64, lda int, b *float64, ldb int, vecs, rows, cols int, mask *int32, out *float64) {
	panic("gemm: no vector kernel")
}
