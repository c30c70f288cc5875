package gemm

import (
	"fmt"
)

// F32 computes c = alpha·op(a)·op(b) + beta·c for float32 row-major
// matrices; see the package documentation for the arguments. It panics
// when a slice is too short for its shape and stride, as BLAS does.
func F32(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int,
	b []float32, ldb int, beta float32, c []float32, ldc int) {
	check(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if !useFMA || k == 0 {
		portable(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	product(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// F64 is F32 for float64.
func F64(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int,
	b []float64, ldb int, beta float64, c []float64, ldc int) {
	check(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if !useFMA || k == 0 {
		portable(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	product(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// check panics unless every matrix fits its slice with its stride.
func check(transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	fits := func(rows, cols, l, ld int) bool {
		return rows == 0 || cols == 0 || (ld >= cols && l >= (rows-1)*ld+cols)
	}
	switch {
	case m < 0 || n < 0 || k < 0:
		panic(fmt.Sprintf("gemm: negative size m=%d n=%d k=%d", m, n, k))
	case !fits(ar, ac, la, lda):
		panic(fmt.Sprintf("gemm: a is %d×%d with stride %d; the slice has %d elements", ar, ac, lda, la))
	case !fits(br, bc, lb, ldb):
		panic(fmt.Sprintf("gemm: b is %d×%d with stride %d; the slice has %d elements", br, bc, ldb, lb))
	case !fits(m, n, lc, ldc):
		panic(fmt.Sprintf("gemm: c is %d×%d with stride %d; the slice has %d elements", m, n, ldc, lc))
	}
}

// float is the element types the kernels serve.
type float interface{ float32 | float64 }

// portable is the product without vector kernels: each element of C is
// one sum in p order, then c = alpha·sum + beta·c (c unread when beta = 0).
func portable[T float](transA, transB bool, m, n, k int, alpha T, a []T, lda int,
	b []T, ldb int, beta T, c []T, ldc int) {
	ars, acs := lda, 1
	if transA {
		ars, acs = 1, lda
	}
	brs, bcs := ldb, 1
	if transB {
		brs, bcs = 1, ldb
	}
	for i := range m {
		for j := range n {
			var s T
			for p := range k {
				s += a[i*ars+p*acs] * b[p*brs+j*bcs]
			}
			v := alpha * s
			if beta != 0 {
				v += beta * c[i*ldc+j]
			}
			c[i*ldc+j] = v
		}
	}
}
