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

// Two heads of one shape on one input, summed: Gorgonia computes the
// gradients of both weights (hᵀ·dz) by one node, and of both biases
// (sum(dz)) by another, so each pair shares one Value.
func ExampleSharedGradients() {
	g := G.NewGraph()
	h := G.NewMatrix(g, tensor.Float64, G.WithShape(4, 3), G.WithName("h"), G.WithInit(G.Ones()))
	var params G.Nodes
	for _, name := range []string{"fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"} {
		shape := []int{3, 2}
		if name[len(name)-4:] == "bias" {
			shape = []int{1, 2}
		}
		params = append(params, G.NewMatrix(g, tensor.Float64, G.WithShape(shape...), G.WithName(name), G.WithInit(G.Ones())))
	}
	head := func(w, b *G.Node) *G.Node {
		return G.Must(G.BroadcastAdd(G.Must(G.Mul(h, w)), b, nil, []byte{0}))
	}
	logits := G.Must(G.Add(head(params[0], params[1]), head(params[2], params[3])))
	cost := G.Must(G.Sum(logits))
	grads, _, err := autogradhooks.Grad(cost, params)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(autogradhooks.SharedGradients(grads))
	// Output: [[0 2] [1 3]]
}
