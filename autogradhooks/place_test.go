package autogradhooks

import (
	"errors"
	"slices"
	"testing"
	"unsafe"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// placingNet is cost = sum(x·w) with w's hook given by place.
func placingNet(t *testing.T, place PlaceFunc) (w *G.Node, vm G.VM) {
	t.Helper()
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 3), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6}))))
	w = G.NewMatrix(g, tensor.Float64, G.WithShape(3, 2), G.WithName("w"),
		G.WithValue(tensor.New(tensor.WithShape(3, 2), tensor.WithBacking([]float64{1, 1, 1, 1, 1, 1}))))
	s, err := NewPlacing(G.Nodes{w}, place)
	if err != nil {
		t.Fatal(err)
	}
	y, err := G.Mul(x, s.Node(0))
	if err != nil {
		t.Fatal(err)
	}
	cost, err := G.Sum(y)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Grad(cost); err != nil {
		t.Fatal(err)
	}
	vm = G.NewTapeMachine(g)
	t.Cleanup(func() { vm.Close() })
	return w, vm
}

// A PlaceFunc's Value becomes the parameter's gradient: what a solver
// reads is the caller's memory, holding what the callback put there.
func TestNewPlacing(t *testing.T) {
	buf := make([]float64, 6)
	placed := tensor.New(tensor.WithShape(3, 2), tensor.WithBacking(buf))
	w, vm := placingNet(t, func(_ int, grad G.Value) (G.Value, error) {
		copy(buf, grad.Data().([]float64))
		return placed, nil
	})
	for run := range 2 { // the second run reuses the placed Value after Reset
		if err := RunAll(vm); err != nil {
			t.Fatal(err)
		}
		gv, err := w.Grad()
		if err != nil {
			t.Fatal(err)
		}
		got := gv.Data().([]float64)
		if unsafe.SliceData(got) != unsafe.SliceData(buf) {
			t.Fatalf("run %d: w's gradient is not the placed Value", run)
		}
		// d sum(x·w)/dw[k][j] = sum over rows of x[r][k]: 5, 7, 9.
		if want := []float64{5, 5, 7, 7, 9, 9}; !slices.Equal(got, want) {
			t.Fatalf("run %d: gradient %v, want %v", run, got, want)
		}
		vm.Reset()
	}
}

// A placed Value of another shape is refused, naming the parameter.
func TestNewPlacingWrongShape(t *testing.T) {
	_, vm := placingNet(t, func(_ int, grad G.Value) (G.Value, error) {
		return tensor.New(tensor.WithShape(6), tensor.Of(tensor.Float64)), nil
	})
	err := RunAll(vm)
	var he *HookError
	if !errors.As(err, &he) || he.Param != "w" {
		t.Fatalf("RunAll = %v, want a HookError for w", err)
	}
	if _, err := NewPlacing(nil, nil); err == nil {
		t.Error("NewPlacing with a nil PlaceFunc succeeded")
	}
}
