package optim

import (
	"math"
	"slices"

	"github.com/goddp/ddp/pg"
)

// This file holds the update rules, each as PyTorch writes it.

// sgd is PyTorch's SGD without weight decay, dampening or Nesterov, as
// torch.optim.sgd._single_tensor_sgd computes it:
//
//	p += (−lr)·g                                 momentum 0
//	buf = clone(g) on the first step             momentum μ
//	buf = μ·buf + g afterwards
//	p += (−lr)·buf
//
// in the parameter's dtype, each product rounded before the sum (no fused
// multiply-add).
type sgd struct {
	base
	momentum float64
}

func (o *sgd) Step(params, grads []pg.Tensor) error {
	if err := o.check(params, grads); err != nil {
		return err
	}
	for i, p := range params {
		if grads[i].Data == nil {
			continue // no gradient: torch skips a None grad
		}
		if p.Dtype == pg.Float32 {
			o.update32(i, pg.View[float32](p), pg.View[float32](grads[i]))
		} else {
			o.update64(i, pg.View[float64](p), pg.View[float64](grads[i]))
		}
		o.steps[i]++
	}
	o.step++
	return nil
}

func (o *sgd) update32(i int, p, g []float32) {
	if o.momentum != 0 {
		g = sgdMomentum(&o.bufs[0][i], g, float32(o.momentum), pg.Float32s)
	}
	sgdStep(p, g, float32(-o.lr))
}

func (o *sgd) update64(i int, p, g []float64) {
	if o.momentum != 0 {
		g = sgdMomentum(&o.bufs[0][i], g, o.momentum, pg.Float64s)
	}
	sgdStep(p, g, -o.lr)
}

// sgdMomentum updates the momentum buffer *buf from g and returns it.
func sgdMomentum[T float](buf *pg.Tensor, g []T, mu T, view func([]T) pg.Tensor) []T {
	if buf.Data == nil {
		b := slices.Clone(g)
		*buf = view(b)
		return b
	}
	b := pg.View[T](*buf)
	for k, gk := range g {
		b[k] = T(mu*b[k]) + gk
	}
	return b
}

// sgdStep is p += alpha·d, alpha being −lr in the parameter's dtype.
func sgdStep[T float](p, d []T, alpha T) {
	for k, dk := range d {
		p[k] += T(alpha * dk)
	}
}

func (o *sgd) Load(s State) error { return o.load(s, true) }

type float interface{ ~float32 | ~float64 }

// adam is PyTorch's Adam without weight decay or AMSGrad, following
// torch.optim.adam._single_tensor_adam (the path PyTorch takes for CPU
// tensors) operation by operation, at step t (counted from 1):
//
//	exp_avg.lerp_(g, 1−β1)                       m += (1−β1)·(g − m)
//	exp_avg_sq.mul_(β2).addcmul_(g, g, 1−β2)     v = β2·v + (1−β2)·g·g
//	bias_correction1 = 1 − β1^t                  float64 scalars, as in Python
//	bias_correction2 = 1 − β2^t
//	step_size = lr / bias_correction1
//	denom = v.sqrt() / sqrt(bias_correction2) + ε
//	p.addcdiv_(m, denom, value=−step_size)      p += (−step_size)·m / denom
//
// Tensor arithmetic is in the parameter's dtype, float32 parameters in
// float32, with the float64 scalars rounded to it as PyTorch rounds a
// Python number for a float32 tensor; each operation is rounded (no fused
// multiply-add), and 1−β1 is computed at run time, 0.09999999999999998 as
// in Python. Algebraically this is m̂ = m/(1−β1^t), v̂ = v/(1−β2^t),
// p −= lr·m̂/(√v̂ + ε), where ε is added after the bias correction.
// math.Pow may differ from C's pow in the last bit of β^t.
type adam struct {
	base
	beta1, beta2, eps float64
}

func (o *adam) Step(params, grads []pg.Tensor) error {
	if err := o.check(params, grads); err != nil {
		return err
	}
	var c adamScalars
	for i, p := range params {
		if grads[i].Data == nil {
			continue // no gradient: torch skips a None grad, and its state["step"] stays
		}
		o.steps[i]++
		if t := o.steps[i]; t != c.t { // one parameter's step count, as torch's state["step"]
			c = o.scalars(t)
		}
		m, v := &o.bufs[0][i], &o.bufs[1][i]
		if m.Data == nil {
			*m, *v = pg.NewTensor(p.Dtype, p.Len()), pg.NewTensor(p.Dtype, p.Len())
		}
		if p.Dtype == pg.Float32 {
			adamStep(pg.View[float32](p), pg.View[float32](grads[i]), pg.View[float32](*m), pg.View[float32](*v), c)
		} else {
			adamStep(pg.View[float64](p), pg.View[float64](grads[i]), pg.View[float64](*m), pg.View[float64](*v), c)
		}
	}
	o.step++
	return nil
}

// adamScalars are the Python-float scalars of step t (counted from 1).
type adamScalars struct {
	t                                    int
	w1, beta2, w2, bc2Sqrt, eps, negStep float64
}

func (o *adam) scalars(t int) adamScalars {
	return adamScalars{
		t:       t,
		w1:      1 - o.beta1,
		beta2:   o.beta2,
		w2:      1 - o.beta2,
		bc2Sqrt: math.Sqrt(1 - math.Pow(o.beta2, float64(t))),
		eps:     o.eps,
		negStep: -(o.lr / (1 - math.Pow(o.beta1, float64(t)))),
	}
}

func adamStep[T float](p, g, m, v []T, c adamScalars) {
	w1, beta2, w2 := T(c.w1), T(c.beta2), T(c.w2)
	bc2Sqrt, eps, negStep := T(c.bc2Sqrt), T(c.eps), T(c.negStep)
	for k, gk := range g {
		m[k] += T(w1 * (gk - m[k]))
		v[k] = T(v[k]*beta2) + T(T(w2*gk)*gk)
		denom := T(T(math.Sqrt(float64(v[k])))/bc2Sqrt) + eps
		p[k] += T(T(negStep*m[k]) / denom)
	}
}

// Load takes a state whose Step > 0 only with both buffers of every
// parameter.
func (o *adam) Load(s State) error { return o.load(s, true) }
