package averaging

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// AverageParameters replaces every parameter, in place, with its average
// over g's ranks: torch's average_parameters. The parameters are packed
// into one flat buffer of the widest dtype among them (float16 and
// bfloat16 go up to float32, float32 to float64, as torch.cat promotes),
// the buffer is divided by the group's size, summed with one allreduce,
// and unpacked into each parameter's own dtype. It is collective: every
// rank passes the same number of parameters of the same sizes and dtypes.
func AverageParameters(ctx context.Context, g pg.ProcessGroup, params []pg.Tensor) error {
	if len(params) == 0 {
		return nil
	}
	dt, n, err := flatDtype(params)
	if err != nil {
		return err
	}
	flat := pg.NewTensor(dt, n)
	off := 0
	for _, p := range params {
		if err := backend.Convert(flat.Slice(off, off+p.Len()), p); err != nil {
			return fmt.Errorf("averaging: %w", err)
		}
		off += p.Len()
	}
	if err := commhook.Divide(flat, g.Size()); err != nil {
		return fmt.Errorf("averaging: %w", err)
	}
	if err := g.AllReduce(ctx, flat, pg.Op(pg.Sum)).Wait(ctx); err != nil {
		return fmt.Errorf("averaging: averaging parameters over %d ranks: %w", g.Size(), err)
	}
	off = 0
	for _, p := range params {
		if err := backend.Convert(p, flat.Slice(off, off+p.Len())); err != nil {
			return fmt.Errorf("averaging: %w", err)
		}
		off += p.Len()
	}
	return nil
}

// flatDtype is the dtype torch.cat gives the parameters, and their total
// length.
func flatDtype(params []pg.Tensor) (pg.Dtype, int, error) {
	var dt pg.Dtype
	n := 0
	for i, p := range params {
		if !p.Dtype.IsFloat() {
			return 0, 0, fmt.Errorf("averaging: parameter %d is %v; only floating-point parameters can be averaged", i, p.Dtype)
		}
		if p.IsDevice() {
			return 0, 0, fmt.Errorf("averaging: parameter %d is in device memory; average host copies", i)
		}
		switch {
		case i == 0:
			dt = p.Dtype
		case p.Dtype == dt:
		case p.Dtype == pg.Float64 || dt == pg.Float64:
			dt = pg.Float64
		default: // float32 with a 16-bit type, or float16 with bfloat16
			dt = pg.Float32
		}
		n += p.Len()
	}
	return dt, n, nil
}

// PeriodicOptions configure NewPeriodicModelAverager.
type PeriodicOptions struct {
	// Period (period) is the number of steps per averaging, at least 1.
	// With 1 there is nothing to gain over DDP's own gradient averaging.
	Period int
	// WarmupSteps (warmup_steps, default 0): no averaging before this
	// step. Use the post-local SGD hook's StartLocalSGDIter.
	WarmupSteps int
}

// PeriodicModelAverager is torch's PeriodicModelAverager: each call of
// AverageParameters is one step; it averages the parameters over the group
// when step ≥ WarmupSteps and (step − WarmupSteps) is a multiple of
// Period, then counts the step.
type PeriodicModelAverager struct {
	g    pg.ProcessGroup
	opts PeriodicOptions
	step int
}

// NewPeriodicModelAverager returns an averager over g, starting at step 0.
func NewPeriodicModelAverager(g pg.ProcessGroup, o PeriodicOptions) (*PeriodicModelAverager, error) {
	if o.WarmupSteps < 0 {
		return nil, fmt.Errorf("averaging: WarmupSteps %d must be a non-negative number", o.WarmupSteps)
	}
	if o.Period < 1 {
		return nil, fmt.Errorf("averaging: Period %d must be a positive value", o.Period)
	}
	return &PeriodicModelAverager{g: g, opts: o}, nil
}

// AverageParameters averages params over the group if this step is one
// to average on, and counts the step. It reports whether it averaged.
func (a *PeriodicModelAverager) AverageParameters(ctx context.Context, params []pg.Tensor) (bool, error) {
	do := a.step >= a.opts.WarmupSteps && (a.step-a.opts.WarmupSteps)%a.opts.Period == 0
	a.step++
	if !do {
		return false, nil
	}
	return true, AverageParameters(ctx, a.g, params)
}

// Step is the number of steps counted (torch's averager.step). Save it
// with a checkpoint and give it back with SetStep on resume.
func (a *PeriodicModelAverager) Step() int { return a.step }

// SetStep sets the step count, for a resumed run.
func (a *PeriodicModelAverager) SetStep(step int) error {
	if step < 0 {
		return errors.New("averaging: a step count cannot be negative")
	}
	a.step = step
	return nil
}
