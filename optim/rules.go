package optim

import (
	"math"
	"slices"

	"github.com/goddp/ddp/internal/vec"
	"github.com/goddp/ddp/pg"
)

// This file holds the update rules, each as PyTorch writes it.

// sgd is PyTorch's SGD, as torch.optim.sgd._single_tensor_sgd computes
// it, with weight decay wd, momentum μ, dampening τ:
//
//	d = g.add(p, alpha=wd)                       d = g + wd·p, when wd != 0
//	buf = clone(d) on the first step             when μ != 0
//	buf.mul_(μ).add_(d, alpha=1−τ) afterwards    buf = μ·buf + (1−τ)·d
//	d = d.add(buf, alpha=μ) if Nesterov          d = d + μ·buf
//	d = buf otherwise
//	p.add_(d, alpha=−lr)                         p += (−lr)·d
//
// in the parameter's dtype, each product rounded before the sum (no fused
// multiply-add); 1−τ is a Python float, exactly 1 without dampening, so
// the plain momentum update is buf = μ·buf + d.
type sgd struct {
	base
	momentum, dampening, weightDecay float64
	nesterov                         bool
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
			sgdUpdate(o, &o.bufs, i, pg.View[float32](p), pg.View[float32](grads[i]), pg.Float32s)
		} else {
			sgdUpdate(o, &o.bufs, i, pg.View[float64](p), pg.View[float64](grads[i]), pg.Float64s)
		}
		o.steps[i]++
	}
	o.step++
	return nil
}

// sgdUpdate steps parameter i, p, from its gradient g.
func sgdUpdate[T float](o *sgd, bufs *[][]pg.Tensor, i int, p, g []T, view func([]T) pg.Tensor) {
	d := g
	if o.weightDecay != 0 {
		d = make([]T, len(g))
		wd := T(o.weightDecay)
		for k, gk := range g {
			d[k] = gk + T(wd*p[k])
		}
	}
	if o.momentum != 0 {
		buf := sgdMomentum(&(*bufs)[0][i], d, T(o.momentum), T(1-o.dampening), view)
		if o.nesterov {
			mu := T(o.momentum)
			nd := make([]T, len(d))
			for k, dk := range d {
				nd[k] = dk + T(mu*buf[k])
			}
			d = nd
		} else {
			d = buf
		}
	}
	sgdStep(p, d, T(-o.lr))
}

// sgdMomentum updates the momentum buffer *buf from d and returns it.
func sgdMomentum[T float](buf *pg.Tensor, d []T, mu, w T, view func([]T) pg.Tensor) []T {
	if buf.Data == nil {
		b := slices.Clone(d)
		*buf = view(b)
		return b
	}
	b := pg.View[T](*buf)
	for k, dk := range d {
		b[k] = T(mu*b[k]) + T(w*dk)
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

type float interface{ float32 | float64 }

// adam is PyTorch's Adam and AdamW without AMSGrad, following
// torch.optim.adam._single_tensor_adam and adamw._single_tensor_adamw (the
// paths PyTorch takes for CPU tensors) operation by operation, at step t
// (counted from 1), with weight decay wd:
//
//	p.mul_(1 − lr·wd)                            AdamW (decoupled); 1 − lr·wd a Python float
//	g = g.add(p, alpha=wd)                       Adam (coupled), when wd != 0
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
// math.Pow may differ from C's pow in the last bit of β^t. Torch 1.13
// writes the first moment as exp_avg.mul_(β1).add_(g, alpha=1−β1), which
// can differ from lerp_ (torch 2's form, kept here) in the last bit.
type adam struct {
	base
	beta1, beta2, eps, weightDecay float64
	decoupled                      bool // AdamW
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
			adamDecayStep(adamKernels[float32]{vec.ScaleF32, vec.AdamF32}, pg.View[float32](p), pg.View[float32](grads[i]),
				pg.View[float32](*m), pg.View[float32](*v), c)
		} else {
			adamDecayStep(adamKernels[float64]{vec.ScaleF64, vec.AdamF64}, pg.View[float64](p), pg.View[float64](grads[i]),
				pg.View[float64](*m), pg.View[float64](*v), c)
		}
	}
	o.step++
	return nil
}

// adamScalars are the Python-float scalars of step t (counted from 1).
type adamScalars struct {
	t                                    int
	w1, beta2, w2, bc2Sqrt, eps, negStep float64
	coupled, decay                       float64 // Adam's g += coupled·p, AdamW's p *= decay (1 when none)
}

func (o *adam) scalars(t int) adamScalars {
	coupled, decay := o.weightDecay, 1.0
	if o.decoupled {
		coupled, decay = 0, 1-float64(o.lr*o.weightDecay)
	}
	return adamScalars{
		coupled: coupled,
		decay:   decay,
		t:       t,
		w1:      1 - o.beta1,
		beta2:   o.beta2,
		w2:      1 - o.beta2,
		bc2Sqrt: math.Sqrt(1 - math.Pow(o.beta2, float64(t))),
		eps:     o.eps,
		negStep: -(o.lr / (1 - math.Pow(o.beta1, float64(t)))),
	}
}

// adamKernels are the element-wise kernels of one Adam step in one dtype.
type adamKernels[T float] struct {
	scale func(s []T, f T)                        // s[i] *= f
	step  func(p, g, m, v []T, a vec.AdamStep[T]) // the update proper
}

// adamDecayStep applies the weight decay, if any, and then the update
// proper, which k.step computes as the four lines of the comment on adam
// from exp_avg on, element by element, in that order and rounding.
func adamDecayStep[T float](k adamKernels[T], p, g, m, v []T, c adamScalars) {
	if c.decay != 1 {
		k.scale(p, T(c.decay))
	}
	if c.coupled != 0 {
		wd, gd := T(c.coupled), make([]T, len(g))
		for k, gk := range g {
			gd[k] = gk + T(wd*p[k])
		}
		g = gd
	}
	k.step(p, g, m, v, vec.AdamStep[T]{W1: T(c.w1), Beta2: T(c.beta2), W2: T(c.w2), BC2Sqrt: T(c.bc2Sqrt),
		Eps: T(c.eps), NegStep: T(c.negStep)})
}

// Load takes a state whose Step > 0 only with both buffers of every
// parameter.
func (o *adam) Load(s State) error { return o.load(s, true) }
