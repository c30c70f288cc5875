package ddp

import (
	"context"
	"fmt"
	"slices"

	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// NewJoin prepares training on uneven inputs over the wrapper's
// parameters (reducer.Join, torch's Join with DDP): call Step before each
// RunAll while this rank has data, and Finish when it has none. Finish
// shadows the other ranks' iterations until all are done, then gives every
// rank the last joiner's parameter values.
//
//	j, err := d.NewJoin(reducer.JoinOptions{})
//	for _, batch := range myBatches {
//		if err := j.Step(ctx, true); err != nil { ... }
//		// Let the inputs, d.RunAll, solver.Step, vm.Reset
//	}
//	err = j.Finish(ctx)
//
// With a sharded optimizer (optim.Zero) the joined rank still steps and
// broadcasts the parameters it owns, for every iteration it shadows: pass
// the step as JoinOptions.OnShadowStep. Its gradients are StepTensors'
// for that iteration: the averages, with nil Data (torch's None, which
// package optim skips) for a parameter no rank has used yet.
//
//	z, err := optim.NewZero(g, "adamw", optim.Options{}, sizes, optim.ZeroOptions{})
//	j, err := d.NewJoin(reducer.JoinOptions{OnShadowStep: z.StepContext})
//	// each batch: j.Step, RunAll, params, grads := d.StepTensors(), z.StepContext(ctx, params, grads)
func (d *DDP) NewJoin(o reducer.JoinOptions) (*reducer.Join, error) {
	values := make([]pg.Tensor, len(d.params))
	for i, p := range d.params {
		v, err := gtensor.TensorOf(p.Value())
		if err != nil {
			return nil, fmt.Errorf("ddp: join: parameter %d: %w", i, err)
		}
		values[i] = v
	}
	if step := o.OnShadowStep; step != nil {
		o.OnShadowStep = func(ctx context.Context, params, grads []pg.Tensor) error {
			return step(ctx, params, d.shadowGrads(grads))
		}
	}
	return reducer.NewJoin(d.r, values, o)
}

// shadowGrads are StepTensors' gradients for an iteration this rank
// shadowed under a Join: the averages, and nil Data for a parameter no rank
// has used yet (Note [every parameter is stepped]).
func (d *DDP) shadowGrads(avg []pg.Tensor) []pg.Tensor {
	unusedAll := d.r.GloballyUnused()
	grads := slices.Clone(avg)
	for i := range grads {
		if unusedAll == nil || !unusedAll[i] {
			d.defined[i] = true
		}
		if !d.defined[i] {
			grads[i] = pg.Tensor{Dtype: avg[i].Dtype}
		}
	}
	return grads
}
