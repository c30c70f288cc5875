package gemm

import "golang.org/x/sys/cpu"

//go:generate sh -c "go run ./asmgen > gemm_amd64.s"

// useFMA is fixed for the life of the process: whether this CPU runs
// AVX2 and FMA3, which the kernels in gemm_amd64.s need.
var useFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// The kernels, in gemm_amd64.s (written by ./asmgen). Strides are in
// bytes. tile computes a rows×2·lanes block of C, 1 ≤ rows ≤ maxRows, from
// a (element [r][p] at r·rs + p·cs) and b (row p at p·ldb); mask, when not
// nil, holds 64 bytes of lane masks for the two column vectors, and masked
// lanes are neither read nor written. dot computes rows×cols (≤ 3×4) dot
// products of a's and b's rows over vecs full vectors, plus one masked
// vector when mask is not nil, into out[4r+j].

//go:noescape
func tileF32(a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, k, rows int, mask *int32,
	alpha, beta float32, betaZero bool)

//go:noescape
func tileF64(a *float64, rs, cs int, b *float64, ldb int, c *float64, ldc int, k, rows int, mask *int32,
	alpha, beta float64, betaZero bool)

//go:noescape
func dotF32(a *float32, lda int, b *float32, ldb int, vecs, rows, cols int, mask *int32, out *float32)

//go:noescape
func dotF64(a *float64, lda int, b *float64, ldb int, vecs, rows, cols int, mask *int32, out *float64)
