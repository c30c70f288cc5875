package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/goddp/ddp/pg"
)

// ErrNonfiniteNorm is wrapped by ClipNorm.Clip's error when
// ErrorIfNonfinite is set and the total norm is NaN or infinite.
var ErrNonfiniteNorm = errors.New("optim: the total norm of the gradients is not finite")

// ClipNorm is torch 1.13's torch.nn.utils.clip_grad_norm_(parameters,
// max_norm, norm_type, error_if_nonfinite) as a value: Clip scales every
// gradient in place so that their total norm is at most MaxNorm.
//
// Clip computes each gradient's norm, then the norm of those norms (the
// norm of all gradients seen as one vector), clip_coef = MaxNorm /
// (total + 1e-6) clamped at 1, and multiplies every gradient by it, as
// 1.13 does also when the coefficient is 1 (which changes no value). A
// non-finite total norm makes the coefficient NaN (a NaN gradient) or 0
// (an infinite one), which torch applies too; ErrorIfNonfinite refuses
// instead.
//
// With DDP, clip after RunAll has averaged the gradients and before
// Optimizer.Step: the norm is over every parameter's averaged gradient,
// which a comm hook, seeing one bucket at a time, cannot compute. Clip is
// a deterministic function of the gradients it is given (a fixed order of
// operations, no threads), and every rank holds the same averaged
// gradients, so every rank computes bitwise the same norm and the same
// clipped gradients, without communicating.
type ClipNorm struct {
	// MaxNorm is the largest total norm left unclipped, >= 0 (+Inf clips
	// nothing).
	MaxNorm float64
	// NormType is p of the p-norm: any p > 0, or math.Inf(1) for the
	// largest absolute value. Zero means 2, torch's default.
	NormType float64
	// ErrorIfNonfinite makes Clip return an error wrapping
	// ErrNonfiniteNorm, and leave the gradients as they are, when the
	// total norm is NaN or infinite (torch's error_if_nonfinite).
	ErrorIfNonfinite bool
}

// ClipGradNorm is ClipNorm{MaxNorm: maxNorm, NormType: normType}.Clip(grads),
// torch's clip_grad_norm_(parameters, max_norm, norm_type) with its
// default error_if_nonfinite=False: normType 2 for torch's default (0
// means 2 here too), math.Inf(1) for the largest absolute value.
func ClipGradNorm(grads []pg.Tensor, maxNorm, normType float64) (totalNorm float64, err error) {
	return ClipNorm{MaxNorm: maxNorm, NormType: normType}.Clip(grads)
}

// Clip scales grads in place and returns their total norm before
// clipping, what torch's clip_grad_norm_ returns.
//
// grads are float32 or float64 tensors, as Optimizer.Step takes them
// (ddp.DDP.StepTensors or NodeTensors); a gradient with nil Data is torch's
// None and is neither counted nor written; with none at all the total norm
// is 0. The arithmetic is torch's, in each gradient's dtype; see
// Note [clip arithmetic] for how closely it follows torch's kernels.
func (c ClipNorm) Clip(grads []pg.Tensor) (totalNorm float64, err error) {
	if math.IsNaN(c.MaxNorm) || c.MaxNorm < 0 {
		return 0, fmt.Errorf("optim: max norm %v: want a number >= 0", c.MaxNorm)
	}
	p := c.NormType
	if p == 0 {
		p = 2
	}
	total, f32, err := totalNormOf(grads, p)
	if err != nil {
		return 0, err
	}
	if c.ErrorIfNonfinite && (math.IsNaN(total) || math.IsInf(total, 0)) {
		return total, fmt.Errorf("%w: the %v-norm is %v; the gradients were left as they are (a loss that overflowed, "+
			"or a NaN in the data?)", ErrNonfiniteNorm, p, total)
	}
	if !anyGrad(grads) {
		return total, nil
	}
	coef := clipCoef(total, c.MaxNorm, f32)
	for _, g := range grads {
		scale(g, coef)
	}
	return total, nil
}

// TotalNorm returns the norm that ClipGradNorm(grads, max, normType)
// compares with max, without changing grads: the normType-norm (any p >
// 0, or +Inf) of all gradients seen as one vector, computed as
// clip_grad_norm_ computes it. Gradients with nil Data are left out.
func TotalNorm(grads []pg.Tensor, normType float64) (float64, error) {
	total, _, err := totalNormOf(grads, normType)
	return total, err
}

// ClipGradValue is torch 1.13's torch.nn.utils.clip_grad_value_(parameters,
// v): it clamps every gradient value to [-v, v] in place (v rounded to the
// gradient's dtype; NaN stays NaN). v must be >= 0. Gradients with nil
// Data are skipped. Like ClipNorm, it is deterministic, so every rank
// clamps its averaged gradients bitwise alike; call it after RunAll and
// before Optimizer.Step.
func ClipGradValue(grads []pg.Tensor, v float64) error {
	if math.IsNaN(v) || v < 0 {
		return fmt.Errorf("optim: clip value %v: want a number >= 0", v)
	}
	if err := checkGrads(grads); err != nil {
		return err
	}
	for _, g := range grads {
		switch {
		case g.Data == nil:
		case g.Dtype == pg.Float32:
			clamp(pg.View[float32](g), float32(-v), float32(v))
		default:
			clamp(pg.View[float64](g), -v, v)
		}
	}
	return nil
}

// clamp is torch's clamp_(min=lo, max=hi) for lo <= hi: NaN propagates,
// and a value inside the range keeps its bits (including a zero's sign).
func clamp[T clipFloat](s []T, lo, hi T) {
	for k, x := range s {
		if x < lo {
			s[k] = lo
		} else if x > hi {
			s[k] = hi
		}
	}
}

// checkGrads validates gradients for the clipping functions.
func checkGrads(grads []pg.Tensor) error {
	for i, g := range grads {
		if g.Data == nil {
			continue
		}
		if g.Dtype != pg.Float32 && g.Dtype != pg.Float64 {
			return fmt.Errorf("optim: gradient %d is %v; want float32 or float64", i, g.Dtype)
		}
		if err := g.Validate(); err != nil {
			return fmt.Errorf("optim: gradient %d: %w", i, err)
		}
	}
	return nil
}

func anyGrad(grads []pg.Tensor) bool {
	for _, g := range grads {
		if g.Data != nil {
			return true
		}
	}
	return false
}

// scale multiplies g in place by coef rounded to g's dtype, as torch's
// g.mul_(clip_coef_clamped) does with a 0-dim coefficient.
func scale(g pg.Tensor, coef float64) {
	switch {
	case g.Data == nil:
	case g.Dtype == pg.Float32:
		c := float32(coef)
		s := pg.View[float32](g)
		for k := range s {
			s[k] *= c
		}
	default:
		s := pg.View[float64](g)
		for k := range s {
			s[k] *= coef
		}
	}
}

// clipFloat is the gradients' element types. (rules.go has the same
// constraint for the optimizers; this one keeps clipping self-contained.)
type clipFloat interface{ ~float32 | ~float64 }
