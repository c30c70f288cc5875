package layers_test

import (
	"fmt"
	"log"

	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A two-layer network fits y = x₀ − x₁ on four points with plain Gorgonia
// and SGD; with ddp.Wrap, build the same graph on the DDP's parameter
// nodes (docs/layers.md).
func Example() {
	g := gorgonia.NewGraph()
	param := func(name string, v []float64, shape ...int) *gorgonia.Node {
		return gorgonia.NewTensor(g, tensor.Float64, len(shape), gorgonia.WithName(name),
			gorgonia.WithValue(tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))))
	}
	x := param("x", []float64{0, 0, 0, 1, 1, 0, 1, 1}, 4, 2)
	y := param("y", []float64{0, -1, 1, 0}, 4, 1)
	w1 := param("w1", []float64{0.5, -0.3, 0.2, 0.1, -0.4, 0.6}, 2, 3) // [in, out]
	b1 := param("b1", []float64{0.1, 0.1, 0.1}, 3)
	w2 := param("w2", []float64{0.3, -0.2, 0.4}, 3, 1)
	b2 := param("b2", []float64{0}, 1)
	params := gorgonia.Nodes{w1, b1, w2, b2}

	h, err := layers.Linear(x, w1, b1) // x is the data: no gradient is built for it
	if err != nil {
		log.Fatal(err)
	}
	if h, err = layers.ReLU(h); err != nil {
		log.Fatal(err)
	}
	z, err := layers.Linear(h, w2, b2)
	if err != nil {
		log.Fatal(err)
	}
	diff := gorgonia.Must(gorgonia.Sub(z, y))
	loss := gorgonia.Must(gorgonia.Mean(gorgonia.Must(gorgonia.Square(diff))))
	var lossV gorgonia.Value
	gorgonia.Read(loss, &lossV)
	if _, err := gorgonia.Grad(loss, params...); err != nil {
		log.Fatal(err)
	}

	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	solver := gorgonia.NewVanillaSolver(gorgonia.WithLearnRate(0.2))
	for step := range 300 {
		if err := vm.RunAll(); err != nil {
			log.Fatal(err)
		}
		if step == 0 || step == 5 || step == 10 || step == 20 {
			fmt.Printf("step %d: loss %.4f\n", step, lossV.Data())
		}
		if err := solver.Step(gorgonia.NodesToValueGrads(params)); err != nil {
			log.Fatal(err)
		}
		vm.Reset()
	}
	if err := vm.RunAll(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("step 300: loss %.4f\n", lossV.Data())
	// Output:
	// step 0: loss 0.6532
	// step 5: loss 0.3889
	// step 10: loss 0.2587
	// step 20: loss 0.0544
	// step 300: loss 0.0000
}
