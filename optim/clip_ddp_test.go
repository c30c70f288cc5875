package optim_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// clipRun is what one rank saw at each step: the total norm and the
// clipped gradients' bits.
type clipRun struct {
	totals []float64
	grads  [][]uint32
	params []float32
}

// Two ranks train a small float32 model on different data under ddp.Wrap,
// clipping the averaged gradients (StepTensors) to a 2-norm of 0.05
// before each SGD step. The total norm is above 0.05 at every step, so
// clipping bites, and both ranks compute the same total norms and
// bitwise the same clipped gradients, without communicating.
func TestClipGradNormUnderDDP(t *testing.T) {
	const steps, maxNorm = 4, 0.05
	gs := testworld.Local(t, 2)
	runs := make([]clipRun, len(gs))
	var building sync.Mutex
	testworld.NoErrors(t, testworld.OnGroups(gs, func(rank int, g pg.ProcessGroup) error {
		var err error
		runs[rank], err = clipRank(testworld.Ctx(t), g, &building, steps, maxNorm)
		return err
	}))
	for s := range steps {
		if runs[0].totals[s] <= maxNorm {
			t.Errorf("step %d: total norm %v is not above %v: clipping did not bite", s, runs[0].totals[s], maxNorm)
		}
		if runs[0].totals[s] != runs[1].totals[s] {
			t.Errorf("step %d: total norms %v and %v differ between the ranks", s, runs[0].totals[s], runs[1].totals[s])
		}
	}
	if !slices.EqualFunc(runs[0].grads, runs[1].grads, slices.Equal) {
		t.Error("the ranks' clipped gradients differ")
	}
	if !slices.Equal(runs[0].params, runs[1].params) {
		t.Error("the replicas differ after training")
	}
	t.Logf("total norms %v", runs[0].totals)
}

// clipRank builds x·w1·w2 on rank r's inputs, wraps it and trains.
func clipRank(ctx context.Context, g pg.ProcessGroup, building *sync.Mutex, steps int, maxNorm float64) (clipRun,
	error) {
	var run clipRun
	building.Lock()
	graph := G.NewGraph()
	w1 := G.NewMatrix(graph, tensor.Float32, G.WithShape(3, 2), G.WithName("w1"), G.WithInit(G.GlorotU(1)))
	w2 := G.NewMatrix(graph, tensor.Float32, G.WithShape(2, 1), G.WithName("w2"), G.WithInit(G.GlorotU(1)))
	building.Unlock()
	d, err := ddp.Wrap(ctx, g, G.Nodes{w1, w2}, ddp.Options{})
	if err != nil {
		return run, err
	}
	building.Lock()
	loss, err := clipLoss(graph, d.Node(0), d.Node(1), g.Rank())
	if err == nil {
		_, err = d.Grad(loss)
	}
	building.Unlock()
	if err != nil {
		return run, err
	}
	vm := G.NewTapeMachine(graph)
	defer vm.Close()
	opt, err := optim.New("sgd", 0.5, 2)
	if err != nil {
		return run, err
	}
	for range steps {
		if err := d.RunAll(ctx, vm); err != nil { // the gradients now hold the average over ranks
			return run, err
		}
		params, grads, err := d.StepTensors()
		if err != nil {
			return run, err
		}
		total, err := optim.ClipGradNorm(grads, maxNorm, 2) // after averaging, before the step
		if err != nil {
			return run, err
		}
		run.totals = append(run.totals, total)
		for _, gr := range grads {
			run.grads = append(run.grads, bits32(pg.View[float32](gr)))
		}
		if err := opt.Step(params, grads); err != nil {
			return run, err
		}
		vm.Reset()
	}
	run.params = append(slices.Clone(w1.Value().Data().([]float32)), w2.Value().Data().([]float32)...)
	return run, nil
}

func bits32(s []float32) []uint32 {
	out := make([]uint32, len(s))
	for k, v := range s {
		out[k] = math.Float32bits(v)
	}
	return out
}

// clipLoss is mean((x·w1·w2 − y)²) on rank r's inputs.
func clipLoss(graph *G.ExprGraph, w1, w2 *G.Node, r int) (*G.Node, error) {
	data := make([]float32, 12)
	for k := range data {
		data[k] = float32((k+5*r)%7) - 2
	}
	x := G.NewMatrix(graph, tensor.Float32, G.WithShape(4, 3), G.WithName(fmt.Sprint("x", r)),
		G.WithValue(tensor.New(tensor.WithShape(4, 3), tensor.WithBacking(data))))
	y := G.NewMatrix(graph, tensor.Float32, G.WithShape(4, 1), G.WithName("y"),
		G.WithValue(tensor.New(tensor.WithShape(4, 1), tensor.WithBacking([]float32{1, -1, 2, 0}))))
	h, err := G.Mul(x, w1)
	if err != nil {
		return nil, err
	}
	pred, err := G.Mul(h, w2)
	if err != nil {
		return nil, err
	}
	diff, err := G.Sub(pred, y)
	if err != nil {
		return nil, err
	}
	sq, err := G.Square(diff)
	if err != nil {
		return nil, err
	}
	return G.Mean(sq)
}
