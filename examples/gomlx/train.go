package main

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/sampler"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

type result struct {
	firstLoss, lastLoss, accuracy float64
	params                        []byte // every trainable variable's bytes, by name
}

// mlp is the MLP of examples/train and ddp-train: D → hidden → hidden →
// classes, tanh between the layers.
func mlp(hidden, classes int) func(*mlctx.Context, any, []*graph.Node) []*graph.Node {
	return func(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
		x := graph.Tanh(layers.Dense(ctx.In("fc0"), inputs[0], true, hidden))
		x = graph.Tanh(layers.Dense(ctx.In("fc1"), x, true, hidden))
		return []*graph.Node{layers.Dense(ctx.In("fc2"), x, true, classes)}
	}
}

func newOptimizer(c config) (optimizers.Interface, error) {
	switch c.optimizer {
	case "adam":
		return optimizers.Adam().LearningRate(c.lr).Done(), nil
	case "sgd":
		return optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(c.lr).Done(), nil
	}
	return nil, fmt.Errorf("--optimizer %q: want adam or sgd", c.optimizer)
}

func trainRank(ctx context.Context, g pg.ProcessGroup, c config) (result, error) {
	if c.batch < g.Size() || c.batch%g.Size() != 0 {
		return result{}, errBadBatch
	}
	rows := c.batch / g.Size() // this rank's share of each global batch
	trainSet, testSet := dataset.Synthetic(c.seed, 4096), dataset.Synthetic(c.seed+1, 1024)
	backend, err := simplego.New("ops_sequential") // see docs/gomlx.md: simplego's parallel executor races in v0.26.0
	if err != nil {
		return result{}, err
	}
	defer backend.Finalize()
	mctx := mlctx.New()
	mctx.SetParam(mlctx.ParamInitialSeed, int64(c.seed)+int64(g.Rank())) // rank 0's values win anyway
	var ckpt *checkpoints.Handler
	if c.checkpoint != "" && g.Rank() == 0 {
		if ckpt, err = checkpoints.Build(mctx).Dir(c.checkpoint).Done(); err != nil {
			return result{}, err
		}
	}
	opt, err := newOptimizer(c)
	if err != nil {
		return result{}, err
	}
	model := mlp(c.hidden, trainSet.Classes)
	tr, err := gomlxddp.New(backend, mctx, g, model, losses.SparseCategoricalCrossEntropyLogits, opt, gomlxddp.Options{})
	if err != nil {
		return result{}, err
	}
	defer tr.Close()
	res, err := loop(ctx, tr, g, c, trainSet, rows)
	if err != nil {
		return res, err
	}
	if err := tr.VerifyReplicas(ctx); err != nil {
		return res, err
	}
	if ckpt != nil {
		if err := ckpt.Save(); err != nil {
			return res, err
		}
	}
	if res.params, err = paramBytes(tr); err != nil {
		return res, err
	}
	res.accuracy, err = accuracy(backend, mctx, model, testSet)
	return res, err
}

// loop runs c.steps steps over epochs of this rank's share of the data.
func loop(ctx context.Context, tr *gomlxddp.Trainer, g pg.ProcessGroup, c config, data *dataset.Dataset,
	rows int) (result, error) {
	s, err := sampler.New(data.N, g.Size(), g.Rank(), true, int64(c.seed))
	if err != nil {
		return result{}, err
	}
	var res result
	x, y := make([]float64, rows*data.D), make([]int, rows)
	step := 0
	for epoch := 0; step < c.steps; epoch++ {
		for _, batch := range sampler.Batches(s.Indices(epoch), rows) {
			if step == c.steps || len(batch) < rows {
				break
			}
			data.Gather(batch, x, y)
			loss, err := tr.TrainStep(ctx, []*tensors.Tensor{tensors.FromFlatDataAndDimensions(x, rows, data.D)},
				[]*tensors.Tensor{labels(y)})
			if err != nil {
				return res, fmt.Errorf("step %d: %w", step, err)
			}
			if step == 0 {
				res.firstLoss = loss
			}
			res.lastLoss = loss
			step++
		}
	}
	return res, nil
}

func labels(y []int) *tensors.Tensor {
	l := make([]int32, len(y))
	for i, v := range y {
		l[i] = int32(v)
	}
	return tensors.FromFlatDataAndDimensions(l, len(l), 1)
}

// paramBytes concatenates the trainable variables' bytes, in the
// reducer's order.
func paramBytes(tr *gomlxddp.Trainer) ([]byte, error) {
	var out []byte
	for _, v := range tr.Params() {
		val, err := v.Value()
		if err != nil {
			return nil, err
		}
		if err := val.ConstBytes(func(b []byte) { out = append(out, b...) }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// accuracy is the trained model's share of right answers on data.
func accuracy(backend backends.Backend, mctx *mlctx.Context,
	model func(*mlctx.Context, any, []*graph.Node) []*graph.Node, data *dataset.Dataset) (float64, error) {
	exec, err := mlctx.NewExec(backend, mctx.Reuse(), func(ctx *mlctx.Context, x *graph.Node) *graph.Node {
		return graph.ArgMax(model(ctx, nil, []*graph.Node{x})[0], -1)
	})
	if err != nil {
		return 0, err
	}
	defer exec.Finalize()
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions(data.X, data.N, data.D))
	if err != nil {
		return 0, err
	}
	right := 0
	for i, p := range tensors.MustCopyFlatData[int32](out[0]) {
		if int(p) == data.Y[i] {
			right++
		}
	}
	return float64(right) / float64(data.N), nil
}
