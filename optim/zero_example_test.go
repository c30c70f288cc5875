package optim_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Two ranks shard Adam's state: each keeps the state of the parameters it
// owns, steps them, and broadcasts them, so both end with the same values.
func ExampleNewZero() {
	groups, err := local.New(2, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	sizes := []int{3, 2}
	out := make([]string, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			defer g.Close()
			z, err := optim.NewZero(g, "adam", optim.Options{LR: optim.Set(0.1)}, sizes, optim.ZeroOptions{})
			if err != nil {
				out[r] = err.Error()
				return
			}
			params := []pg.Tensor{pg.Float64s([]float64{1, 2, 3}), pg.Float64s([]float64{4, 5})}
			grads := []pg.Tensor{pg.Float64s([]float64{1, -1, 1}), pg.Float64s([]float64{-1, 1})}
			if err := z.StepContext(context.Background(), params, grads); err != nil {
				out[r] = err.Error()
				return
			}
			out[r] = fmt.Sprintf("rank %d: owners %v, it holds %d bytes of state; parameters %.1f %.1f", r, z.Owners(),
				z.StateBytes(), pg.View[float64](params[0]), pg.View[float64](params[1]))
		})
	}
	wg.Wait()
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// rank 0: owners [0 1], it holds 48 bytes of state; parameters [0.9 2.1 2.9] [4.1 4.9]
	// rank 1: owners [0 1], it holds 32 bytes of state; parameters [0.9 2.1 2.9] [4.1 4.9]
}

// The overlap, driven by hand as the reducer drives it: each rank hands
// its bucket of gradients to the hook, which averages it, steps the
// parameters this rank owns, and broadcasts every parameter from its
// owner over a group of their own; Finish puts the new values in place.
func ExampleZero_Hook() {
	groups, err := local.New(2, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	bcasts, err := local.New(2, local.Options{}) // in a real run: a pg.Splitter's NewGroup
	if err != nil {
		fmt.Println(err)
		return
	}
	out := make([]string, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			defer g.Close()
			defer bcasts[r].Close()
			out[r] = hookStep(g, bcasts[r])
		})
	}
	wg.Wait()
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// rank 0: owners [0 1]; parameters [0.9 2.1 2.9] [4.1 4.9]
	// rank 1: owners [0 1]; parameters [0.9 2.1 2.9] [4.1 4.9]
}

// hookStep is one overlapped step of ExampleZero_Hook on one rank.
func hookStep(g, bcast pg.ProcessGroup) string {
	ctx := context.Background()
	z, err := optim.NewZero(g, "adam", optim.Options{LR: optim.Set(0.1)}, []int{3, 2}, optim.ZeroOptions{})
	if err != nil {
		return err.Error()
	}
	hook, err := z.Hook(nil, bcast, optim.ZeroHookOptions{})
	if err != nil {
		return err.Error()
	}
	params := []pg.Tensor{pg.Float64s([]float64{1, 2, 3}), pg.Float64s([]float64{4, 5})}
	if err := hook.Begin(params, 1); err != nil {
		return err.Error()
	}
	// The rank's gradients, one bucket: the average over both ranks is
	// [1 -1 1] [-1 1].
	grads := []float64{2, -1, 0, -1, 3}
	if g.Rank() == 1 {
		grads = []float64{0, -1, 2, -1, -1}
	}
	bucket := &commhook.GradBucket{Buffer: pg.Float64s(grads), IsLast: true, Params: []commhook.ParamView{
		{Index: 0, Name: "w", Len: 3}, {Index: 1, Name: "b", Offset: 3, Len: 2}}}
	if err := hook.Run(ctx, g, bucket).Wait(ctx); err != nil {
		hook.Abandon()
		return err.Error()
	}
	if err := hook.Finish(); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("rank %d: owners %v; parameters %.1f %.1f", g.Rank(), z.Owners(),
		pg.View[float64](params[0]), pg.View[float64](params[1]))
}
