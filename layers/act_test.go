package layers

import (
	"fmt"
	"math"
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

type actFunc func(*gorgonia.Node) (*gorgonia.Node, error)

// unary applies f to the leaf after a product with a second leaf, so that
// the activation's input is an op's output and its gradient flows to
// both leaves.
func unary(f actFunc) func(*gorgonia.ExprGraph, gorgonia.Nodes) (*gorgonia.Node, error) {
	return func(_ *gorgonia.ExprGraph, l gorgonia.Nodes) (*gorgonia.Node, error) {
		z, err := gorgonia.HadamardProd(l[0], l[1])
		if err != nil {
			return nil, err
		}
		return f(z)
	}
}

// ReLU and Tanh match Gorgonia's Rectify and Tanh, values and gradients,
// in both dtypes, on a second run too, and their float64 gradients match
// central differences (no input lies near ReLU's kink).
func TestActivationsMatchGorgonia(t *testing.T) {
	for name, fs := range map[string][2]actFunc{
		"relu": {ReLU, gorgonia.Rectify},
		"tanh": {Tanh, gorgonia.Tanh},
	} {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			t.Run(fmt.Sprintf("%s/%v", name, dt), func(t *testing.T) {
				vals := func() []*tensor.Dense { return []*tensor.Dense{filled(dt, 1, 4, 6), filled(dt, 2, 4, 6)} }
				ours, ref := newCase(t, vals(), unary(fs[0])), newCase(t, vals(), unary(fs[1]))
				wantOut, _, wantGrads := ref.run(t)
				for round := range 2 {
					out, _, grads := ours.run(t)
					if d := relDiff(out, wantOut); d > tolerance(dt) {
						t.Errorf("round %d: output differs from Gorgonia's by %g", round, d)
					}
					for i := range grads {
						if d := relDiff(grads[i], wantGrads[i]); d > tolerance(dt) {
							t.Errorf("round %d: gradient of leaf %d differs from Gorgonia's by %g", round, i, d)
						}
					}
				}
				if dt != tensor.Float64 {
					return
				}
				_, _, grads := ours.run(t)
				num := ours.numericGrads(t)
				for i := range grads {
					if d := relDiff(grads[i], num[i]); d > 1e-7 {
						t.Errorf("gradient of leaf %d differs from finite differences by %g", i, d)
					}
				}
			})
		}
	}
}

// ReLU's gradient at 0 is 0, as PyTorch's; negative inputs give 0 and
// NaN stays NaN.
func TestReLUAtZero(t *testing.T) {
	y, err := (&actOp{kind: relu}).Do(tensor.New(tensor.WithBacking([]float64{-2, 0, 3})))
	if err != nil {
		t.Fatal(err)
	}
	if got := toFloat64s(y); got[0] != 0 || got[1] != 0 || got[2] != 3 {
		t.Errorf("relu(-2, 0, 3) = %v", got)
	}
	dx, err := (&actOp{kind: relu, grad: true}).Do(y, tensor.New(tensor.WithBacking([]float64{5, 5, 5})))
	if err != nil {
		t.Fatal(err)
	}
	if got := toFloat64s(dx); got[0] != 0 || got[1] != 0 || got[2] != 5 {
		t.Errorf("relu's gradient at (-2, 0, 3) = %v, want [0 0 5]", got)
	}
	nan, err := (&actOp{kind: relu}).Do(tensor.New(tensor.WithBacking([]float32{float32(nan64())})))
	if err != nil {
		t.Fatal(err)
	}
	if v := toFloat64s(nan)[0]; v == v {
		t.Errorf("relu(NaN) = %v", v)
	}
}

func nan64() float64 { return math.NaN() }

func TestActivationsRejectOtherDtypes(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NodeFromAny(g, tensor.New(tensor.WithBacking([]int{1, 2})), gorgonia.WithName("x"))
	for _, f := range []actFunc{ReLU, Tanh} {
		if _, err := f(x); err == nil {
			t.Error("an int tensor was accepted")
		}
	}
	if _, err := ReLU(nil); err == nil {
		t.Error("nil was accepted")
	}
}
