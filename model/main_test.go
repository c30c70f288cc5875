package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mlpSpec is a small MLP: 3 features, the given hidden sizes, 4 classes.
func mlpSpec(dt tensor.Dtype, batch int, hidden ...int) Spec {
	return Spec{Kind: "mlp", InputShape: []int{3}, Hidden: hidden, Activation: "tanh", Classes: 4, Dtype: dt, Batch: batch}
}

// plain is a model trained without DDP: Forward on the raw parameters.
type plain struct {
	p     *Params
	net   *Net
	grads gorgonia.Nodes
	vm    gorgonia.VM
}

func newPlain(t testing.TB, spec Spec, seed uint64) *plain {
	t.Helper()
	return newPlainOps(t, spec, seed, false)
}

// newPlainOps is newPlain, on Gorgonia's own ops when gorgoniaOps is set
// (the graph the model zoo had before package layers).
func newPlainOps(t testing.TB, spec Spec, seed uint64, gorgoniaOps bool) *plain {
	t.Helper()
	p, err := NewParams(spec, seed)
	if err != nil {
		t.Fatal(err)
	}
	p.gorgoniaOps = gorgoniaOps
	net, err := p.Forward(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	grads, err := gorgonia.Grad(net.Loss, p.Nodes...)
	if err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(p.Graph)
	t.Cleanup(func() { vm.Close() })
	return &plain{p: p, net: net, grads: grads, vm: vm}
}

// run feeds a batch, runs forward and backward, and returns the loss and
// a copy of every gradient.
func (m *plain) run(t testing.TB, x []float64, labels []int) (float64, [][]float64) {
	t.Helper()
	if err := m.net.Feed(m.net.spec, x, labels); err != nil {
		t.Fatal(err)
	}
	if err := m.vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	defer m.vm.Reset()
	grads := make([][]float64, len(m.grads))
	for i, g := range m.grads {
		grads[i] = floats(g.Value())
	}
	return m.net.LossValue(), grads
}

// data draws rows of features in [-1, 1) and labels in [0, classes).
func data(spec Spec, rows int, seed uint64) ([]float64, []int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	x := make([]float64, rows*spec.Features())
	for k := range x {
		x[k] = 2*rng.Float64() - 1
	}
	labels := make([]int, rows)
	for r := range labels {
		labels[r] = rng.IntN(spec.Classes)
	}
	return x, labels
}

// maxRelDiff is max|a-b| / max(max|b|, tiny) over all entries.
func maxRelDiff(a, b [][]float64) float64 {
	diff, scale := 0.0, 0.0
	for i := range b {
		if len(a[i]) != len(b[i]) {
			return math.Inf(1)
		}
		for k := range b[i] {
			diff = max(diff, math.Abs(a[i][k]-b[i][k]))
			scale = max(scale, math.Abs(b[i][k]))
		}
	}
	return diff / max(scale, 1e-300)
}
