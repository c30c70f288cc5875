package optim_test

import (
	"context"
	"fmt"
	"sync"

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
