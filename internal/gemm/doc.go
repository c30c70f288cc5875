// Package gemm multiplies dense row-major matrices: C = α·op(A)·op(B) + β·C,
// where op(X) is X or its transpose, for float32 and float64, on the calling
// goroutine only (a data-parallel job runs one rank per core, so a kernel
// that spawns its own threads competes with the other ranks).
//
// The arguments follow BLAS's gemm with row-major storage: A is m×k (k×m when
// transA), B is k×n (n×k when transB), C is m×n, and lda, ldb, ldc are the
// row strides. β = 0 overwrites C without reading it, so C may hold NaN or
// garbage; otherwise C is scaled by β first.
package gemm
