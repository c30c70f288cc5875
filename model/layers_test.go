package model

import (
	"fmt"
	"testing"

	"github.com/goddp/ddp/optim"
	"gorgonia.org/tensor"
)

// train runs steps optimizer steps on batches drawn from seed and returns
// the parameters.
func (m *plain) train(t testing.TB, opt optim.Optimizer, steps int, seed uint64) [][]float64 {
	t.Helper()
	spec := m.net.spec
	for s := range steps {
		x, labels := data(spec, spec.Batch-s%2, seed+uint64(s))
		if err := m.net.Feed(spec, x, labels); err != nil {
			t.Fatal(err)
		}
		if err := m.vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		ps, gs, err := optim.NodeTensors(m.p.Nodes)
		if err != nil {
			t.Fatal(err)
		}
		if err := opt.Step(ps, gs); err != nil {
			t.Fatal(err)
		}
		m.vm.Reset()
	}
	out := make([][]float64, m.p.Len())
	for i := range out {
		out[i] = m.p.Value(i)
	}
	return out
}

// The model zoo on package layers trains as it did on Gorgonia's own ops:
// from the same start and batches, the MLP's and the CNN's parameters
// after 20 SGD or Adam steps agree within float tolerance, in both
// dtypes, and so do the first step's loss and gradients. The products
// and sums round in other orders than Gorgonia's (the convolutions' most),
// so float32 gradients agree to a few ulps; Adam divides each gradient by
// its own running size, so a few ulps in a gradient near zero become
// differences of up to lr in a step, hence its looser float32 bound.
func TestLayersTrainAsGorgoniaOps(t *testing.T) {
	tol := map[tensor.Dtype]float64{tensor.Float32: 1e-5, tensor.Float64: 1e-12}
	adamTol := map[tensor.Dtype]float64{tensor.Float32: 1e-3, tensor.Float64: 1e-11}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for name, spec := range map[string]Spec{
			"mlp-relu": {Kind: "mlp", InputShape: []int{12}, Hidden: []int{16, 8}, Activation: "relu", Classes: 5,
				Dtype: dt, Batch: 6},
			"mlp-tanh": mlpSpec(dt, 5, 7, 6),
			"cnn-relu": {Kind: "cnn", InputShape: []int{1, 16, 16}, Activation: "relu", Classes: 4, Dtype: dt, Batch: 3},
			"cnn-tanh": cnnSpec(dt, 2),
		} {
			for _, algo := range []string{"sgd", "adam"} {
				t.Run(fmt.Sprintf("%s/%v/%s", name, dt, algo), func(t *testing.T) {
					ours, ref := newPlainOps(t, spec, 5, false), newPlainOps(t, spec, 5, true)
					x, labels := data(spec, spec.Batch, 11)
					lossA, gradsA := ours.run(t, x, labels)
					lossB, gradsB := ref.run(t, x, labels)
					if d := maxRelDiff([][]float64{{lossA}}, [][]float64{{lossB}}); d > tol[dt] {
						t.Errorf("loss %v, on Gorgonia's ops %v", lossA, lossB)
					}
					if d := maxRelDiff(gradsA, gradsB); d > tol[dt] {
						t.Errorf("gradients differ from Gorgonia's ops' by %g (relative)", d)
					}
					lr := map[string]float64{"sgd": 0.05, "adam": 1e-3}[algo]
					optA, _ := optim.New(algo, lr, ours.p.Len())
					optB, _ := optim.New(algo, lr, ref.p.Len())
					pa, pb := ours.train(t, optA, 20, 3), ref.train(t, optB, 20, 3)
					t.Logf("relative differences: loss %.2g, gradients %.2g, parameters after 20 steps %.2g",
						maxRelDiff([][]float64{{lossA}}, [][]float64{{lossB}}), maxRelDiff(gradsA, gradsB), maxRelDiff(pa, pb))
					if d := maxRelDiff(pa, pb); d > map[string]float64{"sgd": tol[dt], "adam": adamTol[dt]}[algo] {
						t.Errorf("after 20 steps the parameters differ from Gorgonia's ops' by %g (relative)", d)
					}
				})
			}
		}
	}
}
