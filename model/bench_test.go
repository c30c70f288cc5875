package model

import (
	"testing"

	"github.com/goddp/ddp/optim"
	"gorgonia.org/tensor"
)

// One training step (Feed, RunAll, SGD step, Reset) of ddp-train's default
// models on MNIST-shaped batches of 64, without communication, on package
// layers' ops and on Gorgonia's own (ops=gorgonia, the reference).
func BenchmarkStep(b *testing.B) {
	for name, spec := range map[string]Spec{
		"mlp-784-512-512-10/float32": {Kind: "mlp", InputShape: []int{784}, Hidden: []int{512, 512}, Activation: "relu",
			Classes: 10, Dtype: tensor.Float32, Batch: 64},
		"cnn-1x28x28/float32": {Kind: "cnn", InputShape: []int{1, 28, 28}, Activation: "relu", Classes: 10,
			Dtype: tensor.Float32, Batch: 64},
	} {
		for _, ops := range []string{"layers", "gorgonia"} {
			b.Run(name+"/ops="+ops, func(b *testing.B) { benchStep(b, spec, ops == "gorgonia") })
		}
	}
}

func benchStep(b *testing.B, spec Spec, gorgoniaOps bool) {
	b.ReportAllocs()
	m := newPlainOps(b, spec, 1, gorgoniaOps)
	opt, _ := optim.New("sgd", 0.01, m.p.Len())
	x, labels := data(spec, spec.Batch, 2)
	for b.Loop() {
		if err := m.net.Feed(spec, x, labels); err != nil {
			b.Fatal(err)
		}
		if err := m.vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		ps, gs, err := optim.NodeTensors(m.p.Nodes)
		if err != nil {
			b.Fatal(err)
		}
		if err := opt.Step(ps, gs); err != nil {
			b.Fatal(err)
		}
		m.vm.Reset()
	}
}

// BenchmarkFeed binds one MNIST-shaped batch of 32 (ddp-train's default).
func BenchmarkFeed(b *testing.B) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		spec := Spec{Kind: "mlp", InputShape: []int{784}, Hidden: []int{128, 128}, Activation: "relu", Classes: 10,
			Dtype: dt, Batch: 32}
		b.Run(dt.String(), func(b *testing.B) {
			m := newPlain(b, spec, 1)
			x, labels := data(spec, spec.Batch, 2)
			b.ReportAllocs()
			for b.Loop() {
				if err := m.net.Feed(spec, x, labels); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
