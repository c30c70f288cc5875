package gomlxddp_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
)

// bnMLP keeps a moving average of its hidden activations, as batch
// normalisation does (GoMLX's batchnorm needs an op simplego lacks), in a
// non-trainable variable the training graph updates from each rank's own
// rows: a buffer, in DDP's words.
func bnMLP(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := graph.Tanh(layers.Dense(ctx.In("hidden"), inputs[0], true, hidden))
	avg := ctx.In("bn").VariableWithValue("mean", make([]float64, hidden)).SetTrainable(false)
	old := avg.ValueGraph(x.Graph())
	avg.SetValueGraph(graph.Add(graph.MulScalar(old, 0.9), graph.MulScalar(graph.ReduceMean(x, 0), 0.1)))
	return []*graph.Node{layers.Dense(ctx.In("out"), x, true, 1)}
}

// TestBroadcastBuffers: with Options.BroadcastBuffers every variable,
// batch-normalisation averages included, ends bitwise equal on every
// rank; without it the averages stay each rank's own (and the trainable
// variables are equal all the same).
func TestBroadcastBuffers(t *testing.T) {
	const size, steps, rows = 2, 4, 12
	for _, broadcast := range []bool{true, false} {
		got := bnRanks(t, size, steps, rows, gomlxddp.Options{BroadcastBuffers: broadcast})
		buffersEqual := true
		for name, w := range got[0] {
			if !slices.Equal(got[1][name], w) {
				buffersEqual = false
				if !strings.Contains(name, "bn") {
					t.Errorf("BroadcastBuffers=%v: %s differs between the ranks", broadcast, name)
				}
			}
		}
		if buffersEqual != broadcast {
			t.Errorf("BroadcastBuffers=%v: every variable equal on both ranks = %v; variables %v", broadcast, buffersEqual,
				slices.Sorted(maps.Keys(got[0])))
		}
	}
}

func bnRanks(t *testing.T, size, steps, rows int, o gomlxddp.Options) []map[string][]float64 {
	t.Helper()
	groups := tcpGroups(t, size)
	out := onRanks(t, groups, func(r int) (map[string][]float64, error) { return bnRank(groups[r], steps, rows, o) })
	return out
}

// bnRank trains bnMLP and returns every float64 variable, trainable or not.
func bnRank(g pg.ProcessGroup, steps, rows int, o gomlxddp.Options) (map[string][]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(g.Rank()))
	opt, err := optimizerByName("sgd")
	if err != nil {
		return nil, err
	}
	tr, err := gomlxddp.New(backend, c, g, bnMLP, losses.MeanSquaredError, opt, o)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	for s := range steps {
		x, y := batch(s, rows)
		if _, err := tr.TrainStep(ctx, []*tensors.Tensor{shard(x, g.Rank(), g.Size())},
			[]*tensors.Tensor{shard(y, g.Rank(), g.Size())}); err != nil {
			return nil, err
		}
	}
	return allValues(c)
}

// allValues reads every float64 variable of c, trainable or not.
func allValues(c *mlctx.Context) (map[string][]float64, error) {
	out := map[string][]float64{}
	for v := range c.IterVariables() {
		if v.DType() != dtypes.Float64 {
			continue
		}
		val, err := v.Value()
		if err != nil {
			return nil, err
		}
		if out[v.ScopeAndName()], err = tensors.CopyFlatData[float64](val); err != nil {
			return nil, err
		}
	}
	return out, nil
}
