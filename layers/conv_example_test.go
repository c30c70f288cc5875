package layers_test

import (
	"fmt"

	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A 3×3 image convolved with one 2×2 filter and a bias, then max pooled;
// the first convolution of a model reads data, so its input gradient is
// skipped with NoInputGrad.
func ExampleConv2d() {
	g := gorgonia.NewGraph()
	x := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, 3, 3), gorgonia.WithName("x"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(1, 1, 3, 3), tensor.WithBacking([]float64{
			1, 2, 3,
			4, 5, 6,
			7, 8, 9,
		}))))
	w := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, 2, 2), gorgonia.WithName("w"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(1, 1, 2, 2), tensor.WithBacking([]float64{1, 0, 0, -1}))))
	b := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithShape(1), gorgonia.WithName("b"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{10}))))

	z, err := layers.Conv2d(x, w, b, layers.ConvOpts{Padding: [2]int{1, 1}, NoInputGrad: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := layers.MaxPool2d(z, [2]int{2, 2}, [2]int{2, 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	cost, err := gorgonia.Sum(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := gorgonia.Grad(cost, w, b); err != nil {
		fmt.Println(err)
		return
	}
	vm := gorgonia.NewTapeMachine(g)
	defer func() { _ = vm.Close() }()
	if err := vm.RunAll(); err != nil {
		fmt.Println(err)
		return
	}
	dw, _ := w.Grad()
	db, _ := b.Grad()
	fmt.Println("conv:", z.Shape(), z.Value().Data())
	fmt.Println("pool:", p.Shape(), p.Value().Data())
	fmt.Println("dw:", dw.Data(), "db:", db.Data())
	// Output:
	// conv: (1, 1, 4, 4) [9 8 7 10 6 6 6 13 3 6 6 16 10 17 18 19]
	// pool: (1, 1, 2, 2) [9 13 17 19]
	// dw: [19 8 6 1] db: [4]
}
