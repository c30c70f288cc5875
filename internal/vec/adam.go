package vec

import "math"

// AdamStep holds one Adam step's scalars in the parameters' dtype: the
// weights 1−β1 and 1−β2, β2, √(1−β2^t), ε and −lr/(1−β1^t).
type AdamStep[T float32 | float64] struct {
	W1, Beta2, W2, BC2Sqrt, Eps, NegStep T
}

// AdamF32 applies one Adam step to p from its gradient g, updating the
// moments m and v in place, element by element, each operation rounded to
// float32 (no fused multiply-add):
//
//	m[i] = m[i] + W1·(g[i] − m[i])
//	v[i] = v[i]·Beta2 + (W2·g[i])·g[i]
//	p[i] = p[i] + (NegStep·m[i]) / (√v[i] / BC2Sqrt + Eps)
//
// The vector body computes the same IEEE operations in the same order, so
// it returns the scalar loop's bits; the square root is correctly rounded
// in both (float32's through float64 is exact: 53 ≥ 2·24+2 bits). Where a
// result is NaN its payload may differ: the compiler may swap a
// commutative operation's operands, which decides the payload of an
// operation on two NaNs.
func AdamF32(p, g, m, v []float32, a AdamStep[float32]) {
	checkLen3(len(p), len(g), len(m), len(v))
	n := prefix(len(p), strideAdam32)
	if n > 0 {
		adamF32AVX(&p[0], &g[0], &m[0], &v[0], n, a.W1, a.Beta2, a.W2, a.BC2Sqrt, a.Eps, a.NegStep)
	}
	adam(p[n:], g[n:], m[n:], v[n:], a)
}

// AdamF64 is AdamF32 in float64.
func AdamF64(p, g, m, v []float64, a AdamStep[float64]) {
	checkLen3(len(p), len(g), len(m), len(v))
	n := prefix(len(p), strideAdam64)
	if n > 0 {
		adamF64AVX(&p[0], &g[0], &m[0], &v[0], n, a.W1, a.Beta2, a.W2, a.BC2Sqrt, a.Eps, a.NegStep)
	}
	adam(p[n:], g[n:], m[n:], v[n:], a)
}

const (
	strideAdam32 = 16 // float32 elements per Adam iteration: two 8-lane registers
	strideAdam64 = 8  // float64 elements per Adam iteration: two 4-lane registers
)

// adam is the scalar loop: the tail, and the reference the bodies match.
func adam[T float32 | float64](p, g, m, v []T, a AdamStep[T]) {
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	for k := range p {
		gk := g[k]
		m[k] += T(a.W1 * (gk - m[k]))
		v[k] = T(v[k]*a.Beta2) + T(T(a.W2*gk)*gk)
		denom := T(T(math.Sqrt(float64(v[k])))/a.BC2Sqrt) + a.Eps
		p[k] += T(T(a.NegStep*m[k]) / denom)
	}
}
