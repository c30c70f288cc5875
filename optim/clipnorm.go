package optim

import (
	"fmt"
	"math"

	"github.com/goddp/ddp/pg"
)

// Note [clip arithmetic]
//
// clip_grad_norm_ in torch 1.13 is, for gradients g_i:
//
//	norms = [torch.norm(g, p) for g in grads]        # p = inf: g.abs().max()
//	total = torch.norm(torch.stack(norms), p)        # p = inf: torch.max(stack)
//	coef  = max_norm / (total + 1e-6)                # Tensor.__rtruediv__: total.reciprocal() * max_norm
//	g.mul_(torch.clamp(coef, max=1.0)) for every g
//
// every step in the tensors' dtype (the stack is float64 if any gradient
// is). The coefficient is therefore two roundings, a reciprocal and a
// product, not one division, and max_norm and 1e-6 are first rounded to
// the dtype. torch.norm is linalg.vector_norm, whose CPU kernel
// (norm_kernel_tensor_iterator_impl) rounds p to float32 first and then
// reduces, for a contiguous tensor, as follows; the functions here do the
// same, operation by operation:
//
//   - p = 2, float32: the vectorised path. Eight lane sums of x*x, each
//     step a fused multiply-add (Debian's AVX2 kernels are compiled with
//     FMA contraction), then lane 0 + lane 1 + ... + lane 7 in order, then
//     the len%8 remaining elements: four with the product rounded before
//     the addition (GCC vectorises that part of the loop) and the rest
//     fused, then the square root.
//   - p = 2, float64: one running sum in order, each step fused.
//   - p = 1: one running sum of |x| in order. +Inf: the largest |x|,
//     NaN if any is NaN. Other p: the sum of |x|^p in order, then its
//     (1/p)th power, with 1/p computed in the dtype.
//
// That matches Debian's python3-torch 1.13 bitwise on this project's CPU
// tests (optim/testdata/clip_torch.py). What can still differ: a float64
// gradient, or any gradient under p != 2, of 32768 elements or more, when
// torch runs with several threads (at::parallel_for splits such a sum into
// one part per thread; here it is one sum in order, as torch with
// torch.set_num_threads(1)); torch's other kernels (AVX-512 ones have 16
// lanes: with ATEN_CPU_CAPABILITY=avx512, up to 2 float32 ulps here; the
// default ones do not fuse float64 products: up to 5.4e-16 relative); and
// p other than 1, 2 and +Inf, where glibc's pow and Go's math.Pow may
// round differently in the last bit (p = 3: float32 bitwise, float64 up
// to 1.5e-15 relative). None of this changes from rank to rank: the same
// gradients give the same bits on every rank.

// totalNormOf returns the total p-norm of the gradients with Data and
// whether it was computed in float32 (no gradient is float64).
func totalNormOf(grads []pg.Tensor, p float64) (total float64, f32 bool, err error) {
	if math.IsNaN(p) || p <= 0 {
		return 0, false, fmt.Errorf("optim: norm type %v: want a number > 0, or math.Inf(1) for the largest value", p)
	}
	if err := checkGrads(grads); err != nil {
		return 0, false, err
	}
	var norms []float64
	f32 = true
	for _, g := range grads {
		switch {
		case g.Data == nil:
		case g.Dtype == pg.Float32:
			norms = append(norms, float64(vectorNorm(pg.View[float32](g), p, fma32)))
		default:
			norms = append(norms, vectorNorm(pg.View[float64](g), p, math.FMA))
			f32 = false
		}
	}
	switch {
	case len(norms) == 0:
		return 0, true, nil
	case len(norms) == 1:
		return norms[0], f32, nil
	case math.IsInf(p, 1):
		return absMax(norms), f32, nil
	case f32:
		n32 := make([]float32, len(norms))
		for i, n := range norms {
			n32[i] = float32(n) // exact: each was a float32
		}
		return float64(vectorNorm(n32, p, fma32)), true, nil
	}
	return vectorNorm(norms, p, math.FMA), false, nil
}

// clipCoef is torch.clamp(max_norm / (total + 1e-6), max=1.0) in float32
// or float64 (Note [clip arithmetic]). A NaN total gives NaN.
func clipCoef(total, maxNorm float64, f32 bool) float64 {
	if f32 {
		t := float32(total) + float32(1e-6)
		c := float32(1/t) * float32(maxNorm)
		if c > 1 {
			c = 1
		}
		return float64(c)
	}
	c := float64(1/(total+1e-6)) * maxNorm
	if c > 1 {
		c = 1
	}
	return c
}

// vectorNorm is torch.linalg.vector_norm(x, p) for a contiguous x, with
// fma the dtype's fused multiply-add (Note [clip arithmetic]). It is 0
// for an empty x.
func vectorNorm[T clipFloat](x []T, p float64, fma func(a, b, c T) T) T {
	pf := float64(float32(p)) // the kernel's float val
	var zero T
	switch {
	case math.IsInf(pf, 1):
		return absMax(x)
	case pf == 1:
		s := zero
		for _, v := range x {
			s += abs(v)
		}
		return s
	case pf == 2:
		if _, ok := any(zero).(float32); ok {
			return T(norm2F32(any(x).([]float32)))
		}
		s := zero
		for _, v := range x {
			s = fma(v, v, s)
		}
		return T(math.Sqrt(float64(s)))
	}
	norm := T(pf)
	s := zero
	for _, v := range x {
		s += T(math.Pow(float64(abs(v)), float64(norm)))
	}
	return T(math.Pow(float64(s), float64(1/norm)))
}

// norm2F32 is the AVX2 kernel's float32 2-norm (Note [clip arithmetic]).
func norm2F32(x []float32) float32 {
	const lanes = 8
	var acc [lanes]float32
	d := 0
	for ; d < len(x)-len(x)%lanes; d += lanes {
		for j := range lanes {
			acc[j] = fma32(x[d+j], x[d+j], acc[j])
		}
	}
	s := acc[0]
	for j := 1; j < lanes; j++ {
		s += acc[j]
	}
	if len(x)-d >= 4 {
		for end := d + 4; d < end; d++ {
			s += float32(x[d] * x[d]) // the conversion rounds the product: no fusing
		}
	}
	for ; d < len(x); d++ {
		s = fma32(x[d], x[d], s)
	}
	return float32(math.Sqrt(float64(s)))
}

// fma32 is a float32 fused multiply-add, a*b + c rounded once. The
// product is exact in float64; the sum is rounded to odd there (an
// inexact result gets an odd last bit), which makes the rounding to
// float32 that follows the correct one, as if done once.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	bv := s - p // two-sum: e is exactly p + c - s
	e := (p - (s - bv)) + (float64(c) - bv)
	if e != 0 && math.Float64bits(s)&1 == 0 {
		s = math.Nextafter(s, math.Copysign(math.Inf(1), e))
	}
	return float32(s)
}

func abs[T clipFloat](v T) T { return T(math.Abs(float64(v))) }

// absMax is the largest |x|, NaN if any x is NaN, 0 for none (torch's
// max_propagate_nan).
func absMax[T clipFloat](x []T) T {
	var m T
	for _, v := range x {
		a := abs(v)
		if a != a {
			return a
		}
		if a > m {
			m = a
		}
	}
	return m
}
