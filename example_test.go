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

// Rank 1's graph does not reach parameter b, yet it steps b with the
// average over ranks, as torch's DDP gives every rank the same gradient:
// rank 0's gradient of b is x = [1 2], rank 1 contributes zeros, so the
// average is [0.5 1] on both ranks.
func ExampleDDP_StepTensors() {
	groups, err := local.New(2, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	lines := make([]string, 2)
	var wg sync.WaitGroup
	var building sync.Mutex
	for rank, g := range groups {
		wg.Go(func() { lines[rank] = stepTensorsRank(g, &building) })
	}
	wg.Wait()
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// rank 0: a [2 3] b [0.5 1]
	// rank 1: a [2 3] b [0.5 1]
}

// stepTensorsRank: rank 0's loss is sum(a⊙x) + sum(b⊙x), rank 1's sum(a⊙x).
// Graphs are built under the lock; the collectives (Wrap, RunAll) run
// outside it, on both ranks at once.
func stepTensorsRank(g pg.ProcessGroup, building *sync.Mutex) string {
	ctx := context.Background()
	building.Lock()
	graph := G.NewGraph()
	a := G.NewMatrix(graph, tensor.Float64, G.WithShape(1, 2), G.WithName("a"), G.WithInit(G.Zeroes()))
	b := G.NewMatrix(graph, tensor.Float64, G.WithShape(1, 2), G.WithName("b"), G.WithInit(G.Zeroes()))
	xs := []float64{1 + 2*float64(g.Rank()), 2 + 2*float64(g.Rank())}
	x := G.NewMatrix(graph, tensor.Float64, G.WithShape(1, 2), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(1, 2), tensor.WithBacking(xs))))
	building.Unlock()

	d, err := ddp.Wrap(ctx, g, G.Nodes{a, b}, ddp.Options{FindUnusedParameters: true})
	if err != nil {
		return err.Error()
	}
	building.Lock()
	loss := G.Must(G.Sum(G.Must(G.HadamardProd(d.Node(0), x))))
	if g.Rank() == 0 {
		loss = G.Must(G.Add(loss, G.Must(G.Sum(G.Must(G.HadamardProd(d.Node(1), x))))))
	}
	_, err = d.Grad(loss)
	building.Unlock()
	if err != nil {
		return err.Error()
	}

	vm := G.NewTapeMachine(graph)
	defer vm.Close()
	if err := d.RunAll(ctx, vm); err != nil {
		return err.Error()
	}
	_, grads, err := d.StepTensors() // then opt.Step(params, grads), package optim
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("rank %d: a %v b %v", g.Rank(), pg.View[float64](grads[0]), pg.View[float64](grads[1]))
}
