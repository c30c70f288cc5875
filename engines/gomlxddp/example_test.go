package gomlxddp_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// Train a GoMLX linear model on two ranks of an in-process group (in a
// real job each rank is a process, and the group comes from
// dist.InitProcessGroup). Each rank sees half of every batch; the ranks
// start from different random weights, take rank 0's, and end with the
// same bits.
func Example() {
	groups, err := local.New(2, local.Options{Timeout: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	curves := make([][]float64, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() { curves[r], errs[r] = trainLinear(g) })
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	for r, l := range curves {
		if errs[r] != nil {
			fmt.Printf("rank %d: %v\n", r, errs[r])
			continue
		}
		fmt.Printf("rank %d: loss %.3f → %.3f, replicas identical\n", r, l[0], l[len(l)-1])
	}
	// Output:
	// rank 0: loss 4.015 → 0.005, replicas identical
	// rank 1: loss 10.715 → 0.023, replicas identical
}

// trainLinear is one rank: it fits y = x·(1, 2, 3) + 1.
func trainLinear(g pg.ProcessGroup) ([]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New("ops_sequential") // see docs/gomlx.md: simplego's parallel executor races in v0.26.0
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	mctx := mlctx.New()
	mctx.SetParam(mlctx.ParamInitialSeed, int64(1+g.Rank())) // different on purpose
	model := func(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
		return []*graph.Node{layers.Dense(ctx, inputs[0], true, 1)}
	}
	opt := optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(0.2).Done()
	tr, err := gomlxddp.New(backend, mctx, g, model, losses.MeanSquaredError, opt, gomlxddp.Options{})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	var curve []float64
	for step := range 100 {
		x, y := make([][]float32, 4), make([][]float32, 4) // this rank's half of a batch of 8
		for i := range x {
			row := float32(step%5 + 4*g.Rank() + i)
			x[i] = []float32{row / 8, float32(int(row)%3) / 2, row * row / 64}
			y[i] = []float32{x[i][0] + 2*x[i][1] + 3*x[i][2] + 1}
		}
		loss, err := tr.TrainStep(ctx, []*tensors.Tensor{tensors.FromValue(x)}, []*tensors.Tensor{tensors.FromValue(y)})
		if err != nil {
			return nil, err
		}
		curve = append(curve, loss)
	}
	return curve, tr.VerifyReplicas(ctx)
}
