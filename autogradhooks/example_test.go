package autogradhooks_test

import (
	"fmt"

	"github.com/goddp/ddp/autogradhooks"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// A two-layer net with a third parameter it never uses. The hooks fire
// during RunAll, last layer first; the unused parameter gets none.
func Example() {
	g := G.NewGraph()
	param := func(name string, r, c int) *G.Node {
		data := make([]float64, r*c)
		for k := range data {
			data[k] = float64(k%5)/10 - 0.2
		}
		v := tensor.New(tensor.WithShape(r, c), tensor.WithBacking(data))
		return G.NewMatrix(g, tensor.Float64, G.WithShape(r, c), G.WithName(name), G.WithValue(v))
	}
	x := param("x", 2, 3)
	params := G.Nodes{param("W1", 3, 4), param("W2", 4, 1), param("unused", 2, 2)}

	var fired []string
	hooks, err := autogradhooks.New(params, func(i int, grad G.Value) error {
		// A reducer would hand (i, grad) to its communication goroutine
		// and return at once.
		fired = append(fired, params[i].Name())
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cost, err := twoLayers(x, hooks)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, unused, err := hooks.Grad(cost)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("unused parameters:", unused)

	vm := G.NewTapeMachine(g)
	defer vm.Close()
	solver := G.NewVanillaSolver(G.WithLearnRate(0.1))
	used := G.Nodes{params[0], params[1]}
	for step := range 2 {
		fired = fired[:0]
		if err := autogradhooks.RunAll(vm); err != nil {
			fmt.Println(err)
			return
		}
		// Here DDP waits for the averaged gradients to be written into
		// params[i].Grad() in place.
		if err := solver.Step(G.NodesToValueGrads(used)); err != nil {
			fmt.Println(err)
			return
		}
		vm.Reset()
		fmt.Printf("step %d: hooks fired for %v\n", step, fired)
	}
	// Output:
	// unused parameters: [2]
	// step 0: hooks fired for [W2 W1]
	// step 1: hooks fired for [W2 W1]
}

// twoLayers builds mean((tanh(x·W1)·W2)²), asking for each wrapped
// parameter where it is used.
func twoLayers(x *G.Node, hooks *autogradhooks.Set) (*G.Node, error) {
	h, err := G.Mul(x, hooks.Node(0))
	if err == nil {
		h, err = G.Tanh(h)
	}
	if err == nil {
		h, err = G.Mul(h, hooks.Node(1))
	}
	if err == nil {
		h, err = G.Square(h)
	}
	if err != nil {
		return nil, err
	}
	return G.Mean(h)
}
