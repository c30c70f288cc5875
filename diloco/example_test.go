package diloco_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/ddp/diloco"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Two ranks take inner SGD steps towards different targets with no
// communication; every 2 inner steps DiLoCo averages their
// pseudo-gradients and its outer Nesterov step moves the global
// parameters, from which both continue. By hand: after two inner steps
// the ranks hold 0.75 and 2.25, the average pseudo-gradient is −1.5, and
// the outer step gives 0 − 0.7·(−1.5 + 0.9·(−1.5)) = 1.995; the second
// outer step, with momentum, 2.8505.
func ExampleDiLoCo_Step() {
	groups, err := local.New(2, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	out := make([]string, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			defer g.Close()
			out[r] = train(g)
		})
	}
	wg.Wait()
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// rank 0: synchronised after inner steps [2 4]; parameter [2.8505]
	// rank 1: synchronised after inner steps [2 4]; parameter [2.8505]
}

// train is one rank of ExampleDiLoCo_Step: the loss (p − target)²/2 with
// target 1 on rank 0 and 3 on rank 1.
func train(g pg.ProcessGroup) string {
	ctx := context.Background()
	p := []float64{0}
	params := []pg.Tensor{pg.Float64s(p)}
	inner, err := optim.NewWith("sgd", optim.Options{LR: optim.Set(0.5)}, 1)
	if err != nil {
		return err.Error()
	}
	d, err := diloco.New(g, params, diloco.Options{SyncEvery: 2})
	if err != nil {
		return err.Error()
	}
	defer d.Close(ctx)
	target := float64(1 + 2*g.Rank())
	var synced []int
	for step := 1; step <= 4; step++ {
		grad := []pg.Tensor{pg.Float64s([]float64{p[0] - target})}
		if err := inner.Step(params, grad); err != nil {
			return err.Error()
		}
		applied, err := d.Step(ctx, params)
		if err != nil {
			return err.Error()
		}
		if len(applied) > 0 {
			synced = append(synced, step)
		}
	}
	return fmt.Sprintf("rank %d: synchronised after inner steps %v; parameter %.4f", g.Rank(), synced, p)
}
