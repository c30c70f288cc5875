package main

import (
	"testing"
	"time"

	"github.com/goddp/ddp/model"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BenchmarkEngineStep pairs, in every iteration, one micro-batch's forward
// and backward on each engine, the same model and batch, without
// communication or optimizer: Gorgonia's tape (Feed, RunAll, Reset) and
// --engine gomlx's program (the parameters copied in, the program run, its
// outputs released), and the same program differentiated by GoMLX's
// autodiff. It reports gomlx/gorgonia and autodiff/gomlx, ratios of their
// times (pairing cancels a shared machine's drift), and the engines' times
// per step.
//
//	go test ./cmd/ddp-train -run '^$' -bench BenchmarkEngineStep -benchtime 200x -count 3
func BenchmarkEngineStep(b *testing.B) {
	for _, c := range []struct {
		name string
		spec model.Spec
	}{
		{"mlp-32-128-128-4", model.Spec{Kind: "mlp", InputShape: []int{32}, Hidden: []int{128, 128}, Activation: "relu",
			Classes: 4, Dtype: tensor.Float32, Batch: 32}},
		{"mlp-784-128-128-10", model.Spec{Kind: "mlp", InputShape: []int{784}, Hidden: []int{128, 128},
			Activation: "relu", Classes: 10, Dtype: tensor.Float32, Batch: 32}},
		{"cnn-1x28x28", model.Spec{Kind: "cnn", InputShape: []int{1, 28, 28}, Activation: "relu", Classes: 10,
			Dtype: tensor.Float32, Batch: 32}},
	} {
		b.Run(c.name, func(b *testing.B) { benchEngines(b, c.spec) })
	}
}

func benchEngines(b *testing.B, spec model.Spec) {
	gorgoniaStep := gorgoniaStepper(b, spec)
	gomlxStep := gomlxStepper(b, spec, false)
	autoStep := func([]float64, []int) {}
	if spec.Kind == "mlp" { // simplego cannot differentiate the CNN's ops by itself (Note [the CNN in GoMLX])
		autoStep = gomlxStepper(b, spec, true)
	}
	x := make([]float64, spec.Batch*spec.Features())
	labels := make([]int, spec.Batch)
	for i := range x {
		x[i] = float64(i%13) / 13
	}
	for i := range labels {
		labels[i] = i % spec.Classes
	}
	gorgoniaStep(x, labels) // the first runs compile and allocate
	gomlxStep(x, labels)
	autoStep(x, labels)
	var tg, tx, ta time.Duration
	for b.Loop() {
		t0 := time.Now()
		gorgoniaStep(x, labels)
		t1 := time.Now()
		gomlxStep(x, labels)
		t2 := time.Now()
		autoStep(x, labels)
		tg, tx, ta = tg+t1.Sub(t0), tx+t2.Sub(t1), ta+time.Since(t2)
	}
	b.ReportMetric(float64(tx)/float64(tg), "gomlx/gorgonia")
	if spec.Kind == "mlp" {
		b.ReportMetric(float64(ta)/float64(tx), "autodiff/gomlx")
	}
	b.ReportMetric(float64(tg.Microseconds())/float64(b.N), "gorgonia-µs/step")
	b.ReportMetric(float64(tx.Microseconds())/float64(b.N), "gomlx-µs/step")
}

func gorgoniaStepper(b *testing.B, spec model.Spec) func([]float64, []int) {
	p, err := model.NewParams(spec, 1)
	if err != nil {
		b.Fatal(err)
	}
	net, err := p.Forward(spec, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := gorgonia.Grad(net.Loss, p.Nodes...); err != nil {
		b.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(p.Graph)
	b.Cleanup(func() { vm.Close() })
	return func(x []float64, labels []int) {
		if err := net.Feed(spec, x, labels); err != nil {
			b.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		vm.Reset()
	}
}

// gomlxStepper is --engine gomlx's program; with autodiff, differentiated
// by GoMLX's graph.Gradient instead (Note [the dense layer's gradient]).
func gomlxStepper(b *testing.B, spec model.Spec, autodiff bool) func([]float64, []int) {
	p, err := model.NewParams(spec, 1)
	if err != nil {
		b.Fatal(err)
	}
	net, err := newGoMLXNet(spec, config{})
	if err != nil {
		b.Fatal(err)
	}
	net.autodiff = autodiff
	exec := compileProgram(b, net.program)
	in := make([]any, p.Len())
	for i := range p.Len() {
		in[i] = tensors.FromFlatDataAndDimensions(toFloat32(p.Value(i)), p.Shape(i)...)
	}
	return func(x []float64, labels []int) {
		for i := range p.Len() { // the engine copies the parameters in before each micro-batch
			refill := func(f []float32) { copy(f, toFloat32(p.Value(i))) }
			if err := tensors.MutableFlatData(in[i].(*tensors.Tensor), refill); err != nil {
				b.Fatal(err)
			}
		}
		outs, err := exec.Exec(append(in, net.batch(x, len(labels)), net.labels(labels))...)
		if err != nil {
			b.Fatal(err)
		}
		finalizeAll(outs)
	}
}
