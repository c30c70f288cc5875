package layers_test

import (
	"slices"
	"testing"

	"github.com/goddp/ddp/autogradhooks"
	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestHooksFireThroughConv checks that DDP's gradient hooks, planted by
// autogradhooks' SymDiff, fire through this package's backward ops in
// reverse layer order: the second convolution's parameters first, and
// each hook's gradient equals the parameter's gradient from plain Grad.
func TestHooksFireThroughConv(t *testing.T) {
	ref := newLenet(t, tensor.Float64, 2, 16, true, false)
	run(t, ref.g)

	net := newLenet(t, tensor.Float64, 2, 16, true, false) // for its parameter values
	g := gorgonia.NewGraph()
	x := gorgonia.NodeFromAny(g, net.x.Value(), gorgonia.WithName("x"))
	params := make(gorgonia.Nodes, len(net.params))
	for i, p := range net.params {
		params[i] = gorgonia.NodeFromAny(g, p.Value(), gorgonia.WithName(p.Name()))
	}
	var fired []int
	got := make([][]float64, len(params))
	hooks, err := autogradhooks.New(params, func(i int, grad gorgonia.Value) error {
		fired = append(fired, i)
		got[i] = float64s(t, grad)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h := must(layers.Conv2d(x, hooks.Node(0), hooks.Node(1), layers.ConvOpts{Padding: [2]int{2, 2},
		NoInputGrad: true}))
	h = must(layers.MaxPool2d(must(gorgonia.Rectify(h)), [2]int{2, 2}, [2]int{2, 2}))
	h = must(layers.Conv2d(h, hooks.Node(2), hooks.Node(3), layers.ConvOpts{}))
	h = must(layers.MaxPool2d(must(gorgonia.Rectify(h)), [2]int{2, 2}, [2]int{2, 2}))
	if _, _, err := hooks.Grad(weightedSum(t, h, 30)); err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(g)
	defer func() { _ = vm.Close() }()
	if err := autogradhooks.RunAll(vm); err != nil {
		t.Fatal(err)
	}
	if len(fired) != 4 || !slices.Contains(fired[:2], 2) || !slices.Contains(fired[:2], 3) {
		t.Fatalf("hooks fired for parameters %v; want conv2's (2, 3) before conv1's (0, 1)", fired)
	}
	for i := range params {
		assertClose(t, params[i].Name(), got[i], float64s(t, ref.grads[i].Value()), 0)
	}
}
