package ddp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/diloco"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// DiLoCo under ddp's Join (Note [DiLoCo under Join], package diloco): 3
// ranks with 11, 7 and 3 batches train the MLP with the noop comm hook
// (DiLoCo's inner steps), each joined rank calling StepJoined from
// JoinOptions.OnShadowStep for every iteration it shadows. Every rank
// counts the longest rank's 11 inner steps and ends with bitwise the same
// global parameters, which moved from where they began.
func TestDiLoCoJoin(t *testing.T) {
	batches := []int{11, 7, 3}
	spec := mlpSpec{sizes: mlpSizes(), rows: 4}
	ctx := testCtx(t)
	gs := world(t, len(batches))
	globals := make([][][]float64, len(batches))
	steps := make([]int, len(batches))
	var building sync.Mutex
	noErrors(t, onRanks(gs, func(r int, g pg.ProcessGroup) error {
		m := newMLP[float64](t, spec, referenceSeed)
		if err := m.wrap(ctx, g, Options{Hook: commhook.Noop{}}); err != nil {
			return err
		}
		building.Lock()
		err := m.build(t)
		building.Unlock()
		if err != nil {
			return err
		}
		d, err := dilocoJoinRun(ctx, m, g, spec, batches[r], r)
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		steps[r] = d.StepCount()
		for _, v := range d.Global() {
			globals[r] = append(globals[r], diloco.Widen(v))
		}
		return d.Close(ctx)
	}))
	start := newMLP[float64](t, spec, referenceSeed).values()
	for r := range globals {
		if steps[r] != slices.Max(batches) {
			t.Errorf("rank %d counted %d inner steps, want %d", r, steps[r], slices.Max(batches))
		}
		if fmt.Sprint(globals[r]) != fmt.Sprint(globals[0]) {
			t.Errorf("rank %d's global parameters differ from rank 0's", r)
		}
	}
	if fmt.Sprint(globals[0]) == fmt.Sprint(start) {
		t.Error("the global parameters never moved")
	}
}

// dilocoJoinRun is one rank of TestDiLoCoJoin: its batches under a Join,
// then the shadow iterations, each counted by DiLoCo.
func dilocoJoinRun(ctx context.Context, m *mlp[float64], g pg.ProcessGroup, spec mlpSpec, batches, r int) (
	*diloco.DiLoCo, error) {
	params, err := m.ddp.ParamTensors()
	if err != nil {
		return nil, err
	}
	d, err := diloco.New(g, params, diloco.Options{SyncEvery: 3, Uneven: true})
	if err != nil {
		return nil, err
	}
	opt, err := optim.NewWith("adamw", optim.Options{LR: optim.Set(0.01)}, len(params))
	if err != nil {
		return nil, err
	}
	j, err := m.ddp.NewJoin(reducer.JoinOptions{OnShadowStep: func(ctx context.Context, params, _ []pg.Tensor) error {
		_, err := d.StepJoined(ctx, params)
		return err
	}})
	if err != nil {
		return nil, err
	}
	for it := range batches {
		if err := j.Step(ctx, true); err != nil {
			return nil, err
		}
		if err := m.feed(makeBatch[float64](spec, spec.rows, uint64(2000+10*r+it))); err != nil {
			return nil, err
		}
		if err := m.run(ctx); err != nil {
			return nil, err
		}
		params, grads, err := m.ddp.StepTensors()
		if err == nil {
			err = opt.Step(params, grads)
		}
		if err == nil {
			_, err = d.Step(ctx, params)
		}
		if err != nil {
			return nil, fmt.Errorf("iteration %d: %w", it, err)
		}
		m.vm.Reset()
	}
	return d, j.Finish(ctx)
}
