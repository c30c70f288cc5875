package layers_test

import (
	"testing"

	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestOpsTakeReshapedAndLetInputs feeds the ops as a model does: a batch
// bound with Let every step and reshaped to 4-D, and the output of
// Gorgonia's Transpose.
func TestOpsTakeReshapedAndLetInputs(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(2, 16), gorgonia.WithName("x"))
	w := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(2, 1, 3, 3), gorgonia.WithName("w"),
		gorgonia.WithInit(gorgonia.GlorotU(1)))
	x4 := must(gorgonia.Reshape(x, tensor.Shape{2, 1, 4, 4}))
	z := must(layers.Conv2d(x4, w, nil, layers.ConvOpts{NoInputGrad: true}))
	tr := must(gorgonia.Transpose(z, 0, 1, 3, 2))
	p := must(layers.MaxPool2d(tr, [2]int{2, 2}, [2]int{}))
	if _, err := gorgonia.Grad(must(gorgonia.Sum(p)), w); err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(g)
	defer func() { _ = vm.Close() }()
	for step := range 2 {
		vals := make([]float32, 32)
		vals[step] = 1
		if err := gorgonia.Let(x, tensor.New(tensor.WithShape(2, 16), tensor.WithBacking(vals))); err != nil {
			t.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		vm.Reset()
	}
}
