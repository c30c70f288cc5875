package ddp

import (
	"fmt"

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
func (d *DDP) NewJoin(o reducer.JoinOptions) (*reducer.Join, error) {
	values := make([]pg.Tensor, len(d.params))
	for i, p := range d.params {
		v, err := gtensor.TensorOf(p.Value())
		if err != nil {
			return nil, fmt.Errorf("ddp: join: parameter %d: %w", i, err)
		}
		values[i] = v
	}
	return reducer.NewJoin(d.r, values, o)
}
