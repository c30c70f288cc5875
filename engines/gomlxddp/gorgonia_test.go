package gomlxddp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The same MLP as ddp-train's (package model): fc0.weight [in,
// out] and fc0.bias, tanh between layers, the mean softmax
// cross-entropy; float64 in both engines.
var parity = model.Spec{Kind: "mlp", InputShape: []int{6}, Hidden: []int{16}, Activation: "tanh",
	Classes: 3, Dtype: tensor.Float64, Batch: 12}

// classBatch is step's batch of parity.Batch rows: features and labels.
func classBatch(step int) ([]float64, []int) {
	rng := rand.New(rand.NewPCG(uint64(step), 11))
	d := parity.Features()
	x := make([]float64, parity.Batch*d)
	labels := make([]int, parity.Batch)
	for r := range labels {
		for j := range d {
			x[r*d+j] = rng.NormFloat64()
		}
		for k := range parity.Classes { // the class whose two features sum highest
			if x[r*d+k]+x[r*d+k+3] > x[r*d+labels[r]]+x[r*d+labels[r]+3] {
				labels[r] = k
			}
		}
	}
	return x, labels
}

// TestGorgoniaParity: the Gorgonia path (ddp-train's MLP and optimizer,
// one process) and the GoMLX path (the same weights, data parallel on 2
// ranks over tcp) give the same loss curve and the same parameters.
func TestGorgoniaParity(t *testing.T) {
	const steps, lr, size = 15, 0.3, 2
	p, err := model.NewParams(parity, 5)
	if err != nil {
		t.Fatal(err)
	}
	init := make([][]float64, p.Len())
	for i := range init {
		init[i] = append([]float64(nil), p.Value(i)...)
	}
	want := gorgoniaCurve(t, p, steps, lr)

	groups := tcpGroups(t, size)
	curves := make([][]float64, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { curves[r], errs[r] = gomlxCurve(groups[r], p, init, steps, lr) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for s := range steps {
		got := (curves[0][s] + curves[1][s]) / 2 // equal shards: the mean of the means
		if d := math.Abs(got - want[s]); d > 1e-9 || math.IsNaN(got) {
			t.Errorf("step %d: GoMLX loss %.12f, Gorgonia %.12f (diff %.3g)", s, got, want[s], d)
		}
	}
	if want[steps-1] > want[0]*0.9 {
		t.Errorf("the loss went from %.4f to %.4f: the test trains nothing", want[0], want[steps-1])
	}
	t.Logf("loss %.6f → %.6f in %d steps, both engines", want[0], want[steps-1], steps)
}

// gorgoniaCurve trains p alone with Gorgonia and goddp's SGD.
func gorgoniaCurve(t *testing.T, p *model.Params, steps int, lr float64) []float64 {
	t.Helper()
	net, err := p.Forward(parity, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gorgonia.Grad(net.Loss, p.Nodes...); err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(p.Graph)
	defer vm.Close()
	opt, err := optim.New("sgd", lr, p.Len())
	if err != nil {
		t.Fatal(err)
	}
	var curve []float64
	for s := range steps {
		x, labels := classBatch(s)
		if err := net.Feed(parity, x, labels); err != nil {
			t.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		curve = append(curve, net.LossValue())
		ps, gs, err := optim.NodeTensors(p.Nodes)
		if err == nil {
			err = opt.Step(ps, gs)
		}
		if err != nil {
			t.Fatal(err)
		}
		vm.Reset()
	}
	return curve
}

// gomlxMLP is parity's MLP in GoMLX, with p's parameter names and the
// initial values init (rank 0's are broadcast; other ranks start from
// zeros to show it).
func gomlxMLP(p *model.Params, init [][]float64, rank int) func(*mlctx.Context, any, []*graph.Node) []*graph.Node {
	return func(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
		h := inputs[0]
		for l := 0; 2*l < p.Len(); l++ {
			w, b := variable(ctx, p, init, 2*l, rank), variable(ctx, p, init, 2*l+1, rank)
			h = graph.Add(graph.Dot(h, w.ValueGraph(h.Graph())), graph.ExpandAxes(b.ValueGraph(h.Graph()), 0))
			if 2*l+2 < p.Len() {
				h = graph.Tanh(h)
			}
		}
		return []*graph.Node{h}
	}
}

func variable(ctx *mlctx.Context, p *model.Params, init [][]float64, i, rank int) *mlctx.Variable {
	v := init[i]
	if rank != 0 {
		v = make([]float64, len(v))
	}
	return ctx.VariableWithValue(p.Name(i), tensors.FromFlatDataAndDimensions(v, p.Shape(i)...))
}

// gomlxCurve trains the GoMLX MLP data-parallel; it returns this rank's
// loss at each step.
func gomlxCurve(g pg.ProcessGroup, p *model.Params, init [][]float64, steps int, lr float64) ([]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	opt := optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(lr).Done()
	tr, err := gomlxddp.New(backend, mlctx.New(), g, gomlxMLP(p, init, g.Rank()),
		losses.SparseCategoricalCrossEntropyLogits, opt, gomlxddp.Options{})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	d, n := parity.Features(), parity.Batch/g.Size()
	var curve []float64
	for s := range steps {
		x, labels := classBatch(s)
		lo := g.Rank() * n
		xs := tensors.FromFlatDataAndDimensions(x[lo*d:(lo+n)*d], n, d)
		ys := make([]int32, n)
		for r := range ys {
			ys[r] = int32(labels[lo+r])
		}
		loss, err := tr.TrainStep(ctx, []*tensors.Tensor{xs}, []*tensors.Tensor{tensors.FromFlatDataAndDimensions(ys, n, 1)})
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", s, err)
		}
		curve = append(curve, loss)
	}
	return curve, nil
}
