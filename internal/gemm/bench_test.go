package gemm_test

import (
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/goddp/ddp/internal/gemm"
)

// benchShape is one product the model zoo runs (batch 32).
type benchShape struct {
	name           string
	transA, transB bool
	m, n, k        int
}

var benchShapes = []benchShape{
	{"conv1/fwd", false, false, 6, 784, 25},
	{"conv2/fwd", false, false, 16, 100, 150},
	{"conv1/wgrad", false, true, 6, 25, 784},
	{"conv2/wgrad", false, true, 16, 150, 100},
	{"conv1/dgrad", true, false, 25, 784, 6},
	{"conv2/dgrad", true, false, 150, 100, 16},
	{"fc1/fwd", false, false, 32, 120, 400},
	{"fc2/fwd", false, false, 32, 84, 120},
	{"fc3/fwd", false, false, 32, 10, 84},
	{"fc1/wgrad", true, false, 400, 120, 32},
	{"fc2/wgrad", true, false, 120, 84, 32},
	{"fc3/wgrad", true, false, 84, 10, 32},
	{"fc1/dgrad", false, true, 32, 400, 120},
	{"fc2/dgrad", false, true, 32, 120, 84},
	{"fc3/dgrad", false, true, 32, 84, 10},
	{"mlp1/fwd", false, false, 32, 512, 784},
	{"mlp2/fwd", false, false, 32, 512, 512},
	{"mlp3/fwd", false, false, 32, 10, 512},
	{"mlp1/wgrad", true, false, 784, 512, 32},
	{"mlp2/wgrad", true, false, 512, 512, 32},
	{"mlp3/wgrad", true, false, 512, 10, 32},
	{"mlp1/dgrad", false, true, 32, 784, 512},
	{"mlp2/dgrad", false, true, 32, 512, 512},
	{"mlp3/dgrad", false, true, 32, 512, 10},
}

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// operands returns a, b, c for s with tight strides.
func operands[T float](s benchShape) (a []T, lda int, b []T, ldb int, c []T) {
	lda, ldb = s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	a, b, c = make([]T, s.m*s.k), make([]T, s.k*s.n), make([]T, s.m*s.n)
	for i := range a {
		a[i] = T(i%7) - 3
	}
	for i := range b {
		b[i] = T(i%5) - 2
	}
	return a, lda, b, ldb, c
}

// benchOne runs f b.N times and reports the product's rate.
func benchOne(b *testing.B, s benchShape, f func()) {
	b.ReportAllocs()
	for b.Loop() {
		f()
	}
	b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkF32 compares F32 with gonum's Sgemm on one thread (GOMAXPROCS=1,
// so that gonum's kernels do not spread a product over goroutines).
func BenchmarkF32(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, s := range benchShapes {
		a, lda, bm, ldb, c := operands[float32](s)
		b.Run(s.name+"/ours", func(b *testing.B) {
			benchOne(b, s, func() { gemm.F32(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n) })
		})
		b.Run(s.name+"/gonum", func(b *testing.B) {
			benchOne(b, s, func() {
				gonum.Implementation{}.Sgemm(trans(s.transA), trans(s.transB), s.m, s.n, s.k, 1, a, lda, bm, ldb,
					0, c, s.n)
			})
		})
	}
}

// BenchmarkF64 is BenchmarkF32 for float64 against Dgemm.
func BenchmarkF64(b *testing.B) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for _, s := range benchShapes {
		a, lda, bm, ldb, c := operands[float64](s)
		b.Run(s.name+"/ours", func(b *testing.B) {
			benchOne(b, s, func() { gemm.F64(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, c, s.n) })
		})
		b.Run(s.name+"/gonum", func(b *testing.B) {
			benchOne(b, s, func() {
				gonum.Implementation{}.Dgemm(trans(s.transA), trans(s.transB), s.m, s.n, s.k, 1, a, lda, bm, ldb,
					0, c, s.n)
			})
		})
	}
}
