package main

import (
	"fmt"
	"math"
	"testing"

	"github.com/goddp/ddp/model"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestGoMLXGradientsMatchGorgonia: on the same parameters (model.NewParams)
// and the same batch, --engine gomlx's program gives the loss, the logits
// and every parameter's gradient of the Gorgonia engine's graph, within
// 1e-12 in float64: the CNN (relu and tanh; odd sizes, so the pool drops a
// row and a column, and several input channels, so the weight layout and
// the flattening order matter; runs of zeros in the input, so pool windows
// hold equal values) and the MLP.
func TestGoMLXGradientsMatchGorgonia(t *testing.T) {
	for _, spec := range []model.Spec{
		{Kind: "cnn", InputShape: []int{1, 28, 28}, Activation: "relu", Classes: 10, Batch: 3},
		{Kind: "cnn", InputShape: []int{2, 15, 13}, Activation: "tanh", Classes: 4, Batch: 3},
		{Kind: "cnn", InputShape: []int{3, 12, 12}, Activation: "relu", Classes: 3, Batch: 2},
		{Kind: "mlp", InputShape: []int{7}, Hidden: []int{5, 6}, Activation: "tanh", Classes: 3, Batch: 4},
	} {
		spec.Dtype = tensor.Float64
		t.Run(fmt.Sprintf("%s-%v-%s", spec.Kind, spec.InputShape, spec.Activation), func(t *testing.T) {
			x := make([]float64, spec.Batch*spec.Features())
			for i := range x {
				if i%spec.Features() >= spec.Features()/2 { // the first half of each sample blank, as MNIST's
					x[i] = math.Sin(float64(i)*0.37) + 0.2 // background: pool windows of equal values
				}
			}
			labels := make([]int, spec.Batch)
			for i := range labels {
				labels[i] = (2*i + 1) % spec.Classes
			}
			wantLoss, want := gorgoniaGrads(t, spec, x, labels)
			gotLoss, got := gomlxGrads(t, spec, x, labels)
			if d := math.Abs(gotLoss - wantLoss); d > 1e-12 {
				t.Errorf("loss %v, Gorgonia's %v", gotLoss, wantLoss)
			}
			for i := range want {
				worst := 0.0
				for k := range want[i] {
					worst = max(worst, math.Abs(got[i][k]-want[i][k]))
				}
				if !(worst <= 1e-12) || len(got[i]) != len(want[i]) {
					t.Errorf("parameter %d: gradients differ by up to %.3g", i, worst)
				}
			}
		})
	}
}

func gorgoniaGrads(t *testing.T, spec model.Spec, x []float64, labels []int) (float64, [][]float64) {
	p, err := model.NewParams(spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	net, err := p.Forward(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gorgonia.Grad(net.Loss, p.Nodes...); err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(p.Graph)
	defer vm.Close()
	if err := net.Feed(spec, x, labels); err != nil {
		t.Fatal(err)
	}
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	var grads [][]float64
	for _, n := range p.Nodes {
		g, err := n.Grad()
		if err != nil {
			t.Fatal(err)
		}
		grads = append(grads, append([]float64(nil), g.Data().([]float64)...))
	}
	return net.LossValue(), grads
}

func gomlxGrads(t *testing.T, spec model.Spec, x []float64, labels []int) (float64, [][]float64) {
	p, err := model.NewParams(spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	net, err := newGoMLXNet(spec, config{})
	if err != nil {
		t.Fatal(err)
	}
	exec := compileProgram(t, net.program)
	outs, err := exec.Exec(append(paramArgs(p), net.batch(x, len(labels)), net.labels(labels))...)
	if err != nil {
		t.Fatal(err)
	}
	defer finalizeAll(outs)
	loss, err := scalarOf(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	var grads [][]float64
	for _, o := range outs[2:] {
		grads = append(grads, tensors.MustCopyFlatData[float64](o))
	}
	return loss, grads
}

// compileProgram is an engine program on its own simplego backend, both
// released when tb ends.
func compileProgram(tb testing.TB, fn func([]*graph.Node) []*graph.Node) *graph.Exec {
	tb.Helper()
	backend, err := simplego.New("ops_sequential")
	if err != nil {
		tb.Fatal(err)
	}
	exec, err := graph.NewExec(backend, fn)
	if err != nil {
		backend.Finalize()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { exec.Finalize(); backend.Finalize() })
	return exec
}

// paramArgs are a float64 model's parameters as a program's inputs.
func paramArgs(p *model.Params) []any {
	in := make([]any, p.Len())
	for i := range in {
		in[i] = tensors.FromFlatDataAndDimensions(append([]float64(nil), p.Value(i)...), p.Shape(i)...)
	}
	return in
}
