// Package gemm multiplies dense row-major matrices: C = α·op(A)·op(B) + β·C,
// where op(X) is X or its transpose, for float32 and float64, on the calling
// goroutine only (a data-parallel job runs one rank per core, so a kernel
// that spawns its own threads competes with the other ranks).
//
// The arguments follow BLAS's gemm with row-major storage: A is m×k (k×m when
// transA), B is k×n (n×k when transB), C is m×n, and lda, ldb, ldc are the
// row strides. β = 0 overwrites C without reading it, so C may hold NaN or
// garbage; otherwise C is scaled by β first. α = 0 is not a shortcut: every
// element is α·Σ + β·c as in a plain loop, so a NaN or an infinity in A or B
// reaches C whatever α.
//
// On amd64 CPUs with AVX2 and FMA3 the products run assembly kernels
// (gemm_amd64.s, written by ./asmgen); elsewhere, portable loops. A·B and
// Aᵀ·B read both operands in place: a tile kernel holds 6 rows × 2 vectors
// of C (6×16 float32, 6×8 float64) in registers, broadcasts A's elements
// and streams B's rows, so each element of C is one chain of fused
// multiply-adds in k order. A·Bᵀ with k ≥ 16 runs dot products of A's and
// B's rows (3×4 at a time, lanes summed in a fixed tree); with shorter k,
// and Aᵀ·Bᵀ, one panel of Bᵀ at a time is copied for the tile kernel. The
// tails of m, n and k are masked lanes of the same kernels.
//
// Determinism: the kernel taken and the order of every sum depend only on
// m, n, k, the transposes, β = 0 and the CPU's features, never on where the
// slices lie, so equal operands give equal bits on every call; replicas of
// a data-parallel job on like machines compute bitwise-equal products. The
// vector and portable paths round differently (fused or not), so a job
// whose ranks run on CPUs with and without FMA is not bitwise replicated.
//
// No call allocates but Aᵀ·Bᵀ with k ≥ 16, which takes one k×2-vector panel.
package gemm
