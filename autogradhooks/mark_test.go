package autogradhooks

import (
	"slices"
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The backward mark fires once per run, after forward and before the
// first gradient hook.
func TestMarkBackwardFiresBetweenForwardAndBackward(t *testing.T) {
	g := gorgonia.NewGraph()
	w := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(2, 2), gorgonia.WithName("w"),
		gorgonia.WithInit(gorgonia.Ones()))
	x := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(2, 2), gorgonia.WithName("x"),
		gorgonia.WithInit(gorgonia.Ones()))
	var events []string
	s, err := New(gorgonia.Nodes{w}, func(int, gorgonia.Value) error { events = append(events, "grad"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	cost := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.Mul(x, s.Node(0)))))
	marked, err := MarkBackward(cost, func() { events = append(events, "backward") })
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Grad(marked); err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	for range 2 {
		if err := RunAll(vm); err != nil {
			t.Fatal(err)
		}
		vm.Reset()
	}
	if want := []string{"backward", "grad", "backward", "grad"}; !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
}
