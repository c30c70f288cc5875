package ddp_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Two in-process ranks train a linear model data-parallel, each on its
// own half of the data. Gorgonia seeds its initialisers from the clock,
// so the ranks start from different weights: Wrap copies rank 0's, and
// since every step applies the same averaged gradient, the replicas stay
// identical.
func ExampleWrap() {
	groups, err := local.New(2, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	results := make([]rankResult, len(groups))
	var wg sync.WaitGroup
	var building sync.Mutex // Gorgonia builds graphs unsafely in parallel
	for rank, g := range groups {
		wg.Go(func() { results[rank] = trainRank(g, &building) }) // in a real job, one process per rank
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	for _, r := range results {
		if r.err != nil {
			fmt.Println(r.err)
			return
		}
	}
	fmt.Println("replicas identical:", slices.Equal(results[0].weights, results[1].weights))
	// The mean of the ranks' losses is the loss over all the data.
	first, last := (results[0].first+results[1].first)/2, (results[0].last+results[1].last)/2
	fmt.Println("loss fell:", last < first)
	// Output:
	// replicas identical: true
	// loss fell: true
}

type rankResult struct {
	weights     []float64
	first, last float64 // the loss at the first and the last step
	err         error
}

// trainRank is what every rank runs: build the model, wrap it, train.
// In-process ranks share Gorgonia's graph-building code, which is not
// safe for concurrent use, so building the graph holds a lock.
func trainRank(g pg.ProcessGroup, building *sync.Mutex) (res rankResult) {
	ctx := context.Background()
	building.Lock()
	graph := G.NewGraph()
	w := G.NewMatrix(graph, tensor.Float64, G.WithShape(3, 1), G.WithName("w"), G.WithInit(G.GlorotU(1)))
	building.Unlock()

	d, err := ddp.Wrap(ctx, g, G.Nodes{w}, ddp.Options{}) // collective: checks and syncs the model
	if err != nil {
		return rankResult{err: err}
	}
	building.Lock()
	loss, err := linearLoss(graph, d.Node(0), g.Rank()) // d.Node(i) where the model uses parameter i
	if err == nil {
		_, err = d.Grad(loss)
	}
	building.Unlock()
	if err != nil {
		return rankResult{err: err}
	}

	vm := G.NewTapeMachine(graph) // no BindDualValues
	defer vm.Close()
	solver := G.NewVanillaSolver(G.WithLearnRate(0.1))
	for step := range 20 {
		if err := d.RunAll(ctx, vm); err != nil { // forward, backward, gradients averaged
			return rankResult{err: err}
		}
		res.last = loss.Value().Data().(float64)
		if step == 0 {
			res.first = res.last
		}
		if err := solver.Step(d.ValueGrads()); err != nil {
			return rankResult{err: err}
		}
		vm.Reset()
	}
	res.weights = slices.Clone(w.Value().Data().([]float64))
	return res
}

// linearLoss is mean((x·w - y)²) on rank r's half of the data.
func linearLoss(graph *G.ExprGraph, w *G.Node, r int) (*G.Node, error) {
	x := G.NewMatrix(graph, tensor.Float64, G.WithShape(4, 3), G.WithName("x"), G.WithValue(inputsOf(r)))
	y := G.NewMatrix(graph, tensor.Float64, G.WithShape(4, 1), G.WithName("y"), G.WithValue(tensor.New(
		tensor.WithShape(4, 1), tensor.WithBacking([]float64{1, -1, 2, 0}))))
	pred, err := G.Mul(x, w)
	if err != nil {
		return nil, err
	}
	return meanSquaredError(pred, y)
}

// meanSquaredError is mean((pred-y)²).
func meanSquaredError(pred, y *G.Node) (*G.Node, error) {
	diff, err := G.Sub(pred, y)
	if err != nil {
		return nil, err
	}
	sq, err := G.Square(diff)
	if err != nil {
		return nil, err
	}
	return G.Mean(sq)
}

// inputsOf is rank r's half of the inputs.
func inputsOf(r int) *tensor.Dense {
	data := make([]float64, 12)
	for k := range data {
		data[k] = float64((k+5*r)%7)/3 - 1
	}
	return tensor.New(tensor.WithShape(4, 3), tensor.WithBacking(data))
}
