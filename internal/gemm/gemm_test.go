package gemm_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/internal/gemm"
)

type float interface{ float32 | float64 }

// impl is a product with F32's or F64's arguments.
type impl[T float] func(transA, transB bool, m, n, k int, alpha T, a []T, lda int,
	b []T, ldb int, beta T, c []T, ldc int)

// problem is one product's shapes and operands; the matrices' padding
// (columns past the stride's width) holds NaN, which no product may read.
type problem[T float] struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    T
	a, b, c        []T
	lda, ldb, ldc  int
}

func (p problem[T]) String() string {
	return fmt.Sprintf("tA=%v tB=%v m=%d n=%d k=%d α=%v β=%v lda=%d ldb=%d ldc=%d",
		p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.beta, p.lda, p.ldb, p.ldc)
}

// matrix returns rows×cols values in [-1, 1) with stride ld, padding NaN.
func matrix[T float](rng *rand.Rand, rows, cols, ld int) []T {
	if rows == 0 || cols == 0 {
		return nil
	}
	s := make([]T, (rows-1)*ld+cols)
	for i := range s {
		if i%ld < cols {
			s[i] = T(2*rng.Float64() - 1)
		} else {
			s[i] = T(math.NaN())
		}
	}
	return s
}

func newProblem[T float](rng *rand.Rand, tA, tB bool, m, n, k, pad int, alpha, beta T) problem[T] {
	p := problem[T]{transA: tA, transB: tB, m: m, n: n, k: k, alpha: alpha, beta: beta}
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	p.lda, p.ldb, p.ldc = ac+pad, bc+pad, n+pad
	p.a, p.b, p.c = matrix[T](rng, ar, ac, p.lda), matrix[T](rng, br, bc, p.ldb), matrix[T](rng, m, n, p.ldc)
	return p
}

// reference is the float64 triple loop, with the bound on each element's
// rounding error of a float sum in any order: err ≤ (k+2)·ε·(|α|Σ|a·b| + |β·c|).
func reference[T float](p problem[T]) (want, bound []float64) {
	at := func(i, q int) float64 {
		if p.transA {
			return float64(p.a[q*p.lda+i])
		}
		return float64(p.a[i*p.lda+q])
	}
	bt := func(q, j int) float64 {
		if p.transB {
			return float64(p.b[j*p.ldb+q])
		}
		return float64(p.b[q*p.ldb+j])
	}
	eps := 0x1p-52
	if _, ok := any(p.alpha).(float32); ok {
		eps = 0x1p-23
	}
	want, bound = make([]float64, p.m*p.n), make([]float64, p.m*p.n)
	for i := range p.m {
		for j := range p.n {
			var s, abs float64
			for q := range p.k {
				s += at(i, q) * bt(q, j)
				abs += math.Abs(at(i, q) * bt(q, j))
			}
			v, e := float64(p.alpha)*s, math.Abs(float64(p.alpha))*abs
			if p.beta != 0 {
				v += float64(p.beta) * float64(p.c[i*p.ldc+j])
				e += math.Abs(float64(p.beta) * float64(p.c[i*p.ldc+j]))
			}
			want[i*p.n+j], bound[i*p.n+j] = v, float64(p.k+2)*eps*e+1e-300
		}
	}
	return want, bound
}

// run multiplies a copy of p's C and checks it against the reference, and
// that C's padding is untouched.
func run[T float](t *testing.T, f impl[T], p problem[T]) []T {
	t.Helper()
	want, bound := reference(p)
	c := append([]T(nil), p.c...)
	f(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
	for i := range p.m {
		for j := range p.ldc {
			x := i*p.ldc + j
			if x >= len(c) {
				break
			}
			if j >= p.n {
				if !math.IsNaN(float64(c[x])) {
					t.Fatalf("%v: padding c[%d][%d] = %v was written", p, i, j, c[x])
				}
				continue
			}
			if d := math.Abs(float64(c[x]) - want[i*p.n+j]); !(d <= bound[i*p.n+j]) {
				t.Fatalf("%v: c[%d][%d] = %v, want %v ± %g", p, i, j, c[x], want[i*p.n+j], bound[i*p.n+j])
			}
		}
	}
	return c
}

// impls are the products under test: the exported functions and the
// portable loops they fall back on.
func impls[T float]() map[string]impl[T] {
	var x T
	if _, ok := any(x).(float32); ok {
		return map[string]impl[T]{"F32": any(impl[float32](gemm.F32)).(impl[T]),
			"portable": any(impl[float32](gemm.PortableF32)).(impl[T])}
	}
	return map[string]impl[T]{"F64": any(impl[float64](gemm.F64)).(impl[T]),
		"portable": any(impl[float64](gemm.PortableF64)).(impl[T])}
}

// shapes are the edge cases: empty, one, every tail of the tile kernels
// (6 rows, 16 float32 or 8 float64 columns) and the dot kernel (3×4 dots
// of 8 or 4 lanes), and the model zoo's shapes.
var shapes = [][3]int{
	{0, 0, 0}, {0, 3, 2}, {3, 0, 2}, {3, 2, 0}, {1, 1, 1}, {1, 1, 17}, {7, 1, 1}, {1, 33, 1},
	{5, 15, 3}, {6, 16, 8}, {7, 17, 9}, {12, 32, 16}, {13, 31, 15}, {2, 9, 23}, {4, 5, 31},
	{6, 784, 25}, {16, 100, 150}, {6, 25, 784}, {16, 150, 100}, {150, 100, 16}, {32, 120, 400},
	{32, 10, 84}, {84, 10, 32}, {32, 400, 120},
}

func testShapes[T float](t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for name, f := range impls[T]() {
		for _, s := range shapes {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				for _, pad := range []int{0, 3} {
					for _, ab := range [][2]T{{1, 0}, {1, 1}, {-0.5, 2}, {0, 1.5}} {
						p := newProblem(rng, tr[0], tr[1], s[0], s[1], s[2], pad, ab[0], ab[1])
						t.Run(name, func(t *testing.T) { run(t, f, p) })
					}
				}
			}
		}
	}
}

func TestShapesF32(t *testing.T) { testShapes[float32](t) }
func TestShapesF64(t *testing.T) { testShapes[float64](t) }

// testRandom is the property: any shape, transposes, strides and scalars
// give the reference's product.
func testRandom[T float](t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	scalars := []T{0, 1, -1, 0.5, 3}
	for name, f := range impls[T]() {
		for range 300 {
			p := newProblem(rng, rng.IntN(2) == 0, rng.IntN(2) == 0, rng.IntN(40), rng.IntN(70), rng.IntN(90),
				rng.IntN(4), scalars[rng.IntN(len(scalars))], scalars[rng.IntN(len(scalars))])
			run(t, f, p)
		}
		t.Log(name, "passed")
	}
}

func TestRandomF32(t *testing.T) { testRandom[float32](t) }
func TestRandomF64(t *testing.T) { testRandom[float64](t) }

// testBetaZero: beta = 0 never reads C, so C's NaN does not show.
func testBetaZero[T float](t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for name, f := range impls[T]() {
		for _, s := range shapes {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				p := newProblem[T](rng, tr[0], tr[1], s[0], s[1], s[2], 2, 1, 0)
				for i := range p.c {
					p.c[i] = T(math.NaN())
				}
				t.Run(name, func(t *testing.T) { run(t, f, p) })
			}
		}
	}
}

func TestBetaZeroF32(t *testing.T) { testBetaZero[float32](t) }
func TestBetaZeroF64(t *testing.T) { testBetaZero[float64](t) }

// testNonFinite: a NaN or an infinity in A or B reaches the elements of C
// it reaches in the plain loop, and no others.
func testNonFinite[T float](t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1)}
	for name, f := range impls[T]() {
		for _, s := range shapes[4:] {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				p := newProblem[T](rng, tr[0], tr[1], s[0], s[1], s[2], 0, 1, 1)
				p.a[rng.IntN(len(p.a))] = T(specials[rng.IntN(3)])
				p.b[rng.IntN(len(p.b))] = T(specials[rng.IntN(3)])
				want, _ := reference(p)
				c := append([]T(nil), p.c...)
				f(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
				for x, w := range want {
					g := float64(c[x])
					if math.IsNaN(g) != math.IsNaN(w) || (math.IsInf(w, 0) && g != w) {
						t.Fatalf("%s %v: c[%d] = %v, the plain loop gives %v", name, p, x, g, w)
					}
				}
			}
		}
	}
}

func TestNonFiniteF32(t *testing.T) { testNonFinite[float32](t) }
func TestNonFiniteF64(t *testing.T) { testNonFinite[float64](t) }

// shifted returns a copy of s that starts off elements into a fresh array,
// so that the copies of one matrix lie at every alignment.
func shifted[T float](s []T, off int) []T {
	return append(make([]T, off, off+len(s)), s...)[off:]
}

// testDeterminism: the same operands give the same bits at any address.
func testDeterminism[T float](t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for name, f := range impls[T]() {
		for _, s := range shapes[4:] {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				p := newProblem[T](rng, tr[0], tr[1], s[0], s[1], s[2], 1, 1, 1)
				var first []T
				for off := range 9 {
					c := shifted(p.c, off)
					f(p.transA, p.transB, p.m, p.n, p.k, p.alpha, shifted(p.a, (off+3)%9), p.lda,
						shifted(p.b, (off+5)%9), p.ldb, p.beta, c, p.ldc)
					if first == nil {
						first = c
						continue
					}
					for x := range c {
						if math.Float64bits(float64(c[x])) != math.Float64bits(float64(first[x])) &&
							!math.IsNaN(float64(c[x])) {
							t.Fatalf("%s %v: c[%d] = %v at offset %d, %v at offset 0", name, p, x, c[x], off, first[x])
						}
					}
				}
			}
		}
	}
}

func TestDeterminismF32(t *testing.T) { testDeterminism[float32](t) }
func TestDeterminismF64(t *testing.T) { testDeterminism[float64](t) }

func TestVectorPath(t *testing.T) {
	t.Logf("vector kernels in use: %v", gemm.UseFMA)
}
