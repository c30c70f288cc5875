package commhook

import (
	"math"
	"math/rand/v2"
)

// The dense kernels PowerSGD needs, for row-major matrices: M is n×m, P
// is n×r and Q is m×r, with r small (1 to 4, typically). Each sums in a
// fixed order, so every rank computes the same bits from the same
// inputs, and accumulates in the element type, as BLAS does.

type float interface{ ~float32 | ~float64 }

// mulMQ sets p = mat·q.
func mulMQ[T float](p, mat, q []T, n, m, r int) {
	qt := transpose(q, m, r) // column k of q, contiguous
	for i := range n {
		row, pi := mat[i*m:(i+1)*m], p[i*r:(i+1)*r]
		for k := range pi {
			pi[k] = dot(row, qt[k*m:(k+1)*m])
		}
	}
}

// mulMtP sets q = matᵀ·p.
func mulMtP[T float](q, mat, p []T, n, m, r int) {
	qt := make([]T, r*m) // column k of q, contiguous
	if r == 1 {
		qt = q[:m]
		clear(qt)
	}
	for i := range n {
		row := mat[i*m : (i+1)*m]
		for k, x := range p[i*r : (i+1)*r] {
			axpy(qt[k*m:(k+1)*m], x, row)
		}
	}
	if r > 1 {
		copy(q, transpose(qt, r, m))
	}
}

// decompressInto sets mat = p·qᵀ; with errs non-nil, it first records
// errs = mat − p·qᵀ, the error feedback (torch's input_cp − input).
func decompressInto[T float](mat, errs, p, q []T, n, m, r int) {
	qt := transpose(q, m, r)
	v := make([]T, m)
	for i := range n {
		row, pi := mat[i*m:(i+1)*m], p[i*r:(i+1)*r]
		clear(v)
		for k, x := range pi {
			axpy(v, x, qt[k*m:(k+1)*m])
		}
		if errs != nil {
			sub(errs[i*m:(i+1)*m], row, v)
		}
		copy(row, v)
	}
}

// transpose returns the cols×rows transpose of the rows×cols matrix a
// (a itself when either is 1: the layout is the same).
func transpose[T float](a []T, rows, cols int) []T {
	if rows == 1 || cols == 1 {
		return a[:rows*cols]
	}
	t := make([]T, rows*cols)
	for i := range rows {
		for j, x := range a[i*cols : (i+1)*cols] {
			t[j*rows+i] = x
		}
	}
	return t
}

func dot[T float](a, b []T) T {
	b = b[:len(a)]
	var s0, s1, s2, s3 T
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy sets y += a·x.
func axpy[T float](y []T, a T, x []T) {
	x = x[:len(y)]
	for j := range y {
		y[j] += a * x[j]
	}
}

// orthogonalize makes the r columns of the n×r matrix a orthonormal, in
// place, by modified Gram-Schmidt, as torch's _orthogonalize_gram_schmidt:
// each column is divided by its norm (plus epsilon), then its projection
// is taken out of every later column. With epsilon 0, a column of zeros
// (vanishing gradients) has no direction: it is left at zero, which is
// what torch means to do there (its tensors divide 0 by 0 into NaN).
// torch switches to a QR factorization above rank 2; it spans the same
// columns, up to signs, and P·Qᵀ does not see the signs.
func orthogonalize[T float](a []T, n, r int, epsilon float64) {
	for c := range r {
		var ss T
		for i := range n {
			ss += a[i*r+c] * a[i*r+c]
		}
		norm := T(math.Sqrt(float64(ss)))
		if epsilon != 0 {
			norm += T(epsilon)
		}
		for i := range n {
			if norm == 0 {
				a[i*r+c] = 0
			} else {
				a[i*r+c] /= norm
			}
		}
		for d := c + 1; d < r; d++ {
			var proj T
			for i := range n {
				proj += a[i*r+c] * a[i*r+d]
			}
			for i := range n {
				a[i*r+d] -= proj * a[i*r+c]
			}
		}
	}
}

// fillNormal fills a with standard normal values from a PCG seeded with
// (seed, stream): the same on every rank, different for every stream.
func fillNormal[T float](a []T, seed, stream uint64) {
	rng := rand.New(rand.NewPCG(seed, stream))
	for i := range a {
		a[i] = T(rng.NormFloat64())
	}
}
