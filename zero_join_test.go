package ddp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// trainZeroJoin trains the MLP on len(batches) local ranks, rank r on
// batches[r] batches, under a Join, with AdamW (weight decay 0.01) from
// package optim: unsharded, or sharded by optim.Zero, whose joined ranks
// step and broadcast their own parameters in JoinOptions.OnShadowStep. It
// returns every rank's final values.
func trainZeroJoin(t *testing.T, spec mlpSpec, batches []int, opts Options, zero bool) [][][]float64 {
	t.Helper()
	ctx := testCtx(t)
	gs := world(t, len(batches))
	replicas := make([]*mlp[float64], len(batches))
	for r := range replicas {
		replicas[r] = newMLP[float64](t, spec, referenceSeed)
	}
	var building sync.Mutex
	noErrors(t, onRanks(gs, func(r int, g pg.ProcessGroup) error {
		m := replicas[r]
		if err := m.wrap(ctx, g, opts); err != nil {
			return err
		}
		building.Lock()
		err := m.build(t)
		building.Unlock()
		if err != nil {
			return err
		}
		sizes := make([]int, len(m.params))
		for i, p := range m.params {
			sizes[i] = p.Shape().TotalSize()
		}
		o := optim.Options{LR: optim.Set(0.01)}
		var jo reducer.JoinOptions
		var step func(ctx context.Context, params, grads []pg.Tensor) error
		if zero {
			z, err := optim.NewZero(g, "adamw", o, sizes, optim.ZeroOptions{})
			if err != nil {
				return err
			}
			step, jo.OnShadowStep = z.StepContext, z.StepContext
		} else {
			opt, err := optim.NewWith("adamw", o, len(sizes))
			if err != nil {
				return err
			}
			step = func(_ context.Context, params, grads []pg.Tensor) error { return opt.Step(params, grads) }
		}
		j, err := m.ddp.NewJoin(jo)
		if err != nil {
			return err
		}
		for it := range batches[r] {
			if err := j.Step(ctx, true); err != nil {
				return err
			}
			if err := m.feed(makeBatch[float64](spec, spec.rows, uint64(1000+10*r+it))); err != nil {
				return err
			}
			if err := m.run(ctx); err != nil {
				return err
			}
			params, grads, err := m.ddp.StepTensors()
			if err != nil {
				return err
			}
			if err := step(ctx, params, grads); err != nil {
				return fmt.Errorf("rank %d, iteration %d: %w", r, it, err)
			}
			m.vm.Reset()
		}
		return j.Finish(ctx)
	}))
	out := make([][][]float64, len(replicas))
	for r, m := range replicas {
		out[r] = m.values()
	}
	return out
}

// TestZeroJoin trains 3 ranks with 8, 5 and 3 batches under a Join with
// optim.Zero, each joined rank stepping the parameters it owns in
// OnShadowStep (torch's _ZeROJoinHook), and with the unsharded optimizer
// under the same Join: every rank ends bitwise with the parameters of the
// unsharded run. The ranks that join early own parameters (rank 2 owns the
// most of them), so their shadow steps carry the run. side.weight, which
// no rank's loss reaches, is owned by rank 2. Under StaticGraph it is
// globally unused, so every rank, rank 2 in its shadow steps too, has
// StepTensors' nil gradient for it and skips it (weight decay leaves it
// where it began). Under FindUnusedParameters a shadowing rank reports
// every parameter used, so from the first join on it has zeros, and
// AdamW's decay moves it, on its owner as on the unsharded ranks.
func TestZeroJoin(t *testing.T) {
	batches := []int{8, 5, 3}
	for _, c := range []struct {
		name  string
		spec  mlpSpec
		opts  Options
		fixed bool // side.weight must end where it began
	}{
		{"mlp", mlpSpec{sizes: mlpSizes(), rows: 4}, Options{}, false},
		{"one-bucket-per-parameter", mlpSpec{sizes: mlpSizes(), rows: 4}, Options{BucketCapBytes: 64,
			FirstBucketBytes: 64}, false},
		{"unused-parameter", mlpSpec{sizes: mlpSizes(), rows: 4, extra: true}, Options{FindUnusedParameters: true},
			false},
		{"static-graph-unused", mlpSpec{sizes: mlpSizes(), rows: 4, extra: true}, Options{StaticGraph: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			init := newMLP[float64](t, c.spec, referenceSeed)
			sizes := make([]int, len(init.params))
			for i, p := range init.params {
				sizes[i] = p.Shape().TotalSize()
			}
			owners, err := optim.Partition([][]int{sizes}, len(batches))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(owners[0], 2) || !slices.Contains(owners[0], 1) ||
				(c.spec.extra && owners[0][len(sizes)-1] == 0) {
				t.Fatalf("partition %v: the test needs ranks 1 and 2, which join early, to own parameters (and rank 0, "+
					"the last joiner, not side.weight)", owners[0])
			}
			plain := trainZeroJoin(t, c.spec, batches, c.opts, false)
			zero := trainZeroJoin(t, c.spec, batches, c.opts, true)
			start := init.values()
			for r := range zero {
				for i, p := range init.params {
					if fmt.Sprint(zero[r][i]) != fmt.Sprint(plain[0][i]) {
						t.Errorf("rank %d %s (owner rank %d): Zero under Join differs from the unsharded optimizer", r,
							p.Name(), owners[0][i])
					}
					moved := fmt.Sprint(plain[r][i]) != fmt.Sprint(start[i])
					if unused := c.spec.extra && i == len(sizes)-1; unused && moved == c.fixed || !unused && !moved {
						t.Errorf("rank %d %s: moved %v", r, p.Name(), moved)
					}
				}
			}
		})
	}
}
