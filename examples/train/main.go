package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/sampler"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// config is what the flags set.
type config struct {
	nproc, steps, batch, hidden int
	lr                          float64
	seed                        uint64
	checkpoint                  string
	timeout                     time.Duration
}

func main() {
	var c config
	flag.IntVar(&c.nproc, "nproc", 2, "ranks (goroutines over pg/local)")
	flag.IntVar(&c.steps, "steps", 200, "optimizer steps")
	flag.IntVar(&c.batch, "batch", 64, "global batch size, split evenly over the ranks")
	flag.IntVar(&c.hidden, "hidden", 64, "hidden units")
	flag.Float64Var(&c.lr, "lr", 0.1, "SGD learning rate")
	flag.Uint64Var(&c.seed, "seed", 1, "data and shuffling seed")
	flag.StringVar(&c.checkpoint, "checkpoint", "", "directory to save the final checkpoint in (rank 0)")
	flag.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	results, err := run(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "train:", err)
		os.Exit(1)
	}
	r := results[0]
	fmt.Printf("loss %.4f -> %.4f, test accuracy %.1f%% (chance 25%%), replicas identical: %v\n",
		r.firstLoss, r.lastLoss, 100*r.accuracy, identical(results))
}

// result is what one rank ends with.
type result struct {
	firstLoss, lastLoss, accuracy float64
	weights                       [][]float64
}

// run trains c.nproc ranks at once and returns each rank's result.
func run(ctx context.Context, c config) ([]result, error) {
	if c.nproc < 1 || c.batch%c.nproc != 0 {
		return nil, fmt.Errorf("--batch %d must be a positive multiple of --nproc %d", c.batch, c.nproc)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	groups, err := local.New(c.nproc, local.Options{Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	train := dataset.Synthetic(c.seed, 4096)
	test := dataset.Synthetic(c.seed+1, 1024)
	results := make([]result, c.nproc)
	errs := make([]error, c.nproc)
	var building sync.Mutex // Gorgonia's graph building is not safe for concurrent use
	var wg sync.WaitGroup
	for rank, g := range groups {
		wg.Go(func() {
			results[rank], errs[rank] = trainRank(ctx, g, c, train, test, &building)
			if errs[rank] != nil {
				g.Abort(errs[rank]) // the others fail at once instead of waiting out the timeout
			}
		})
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// trainRank is what every rank runs, in a real job in its own process.
func trainRank(ctx context.Context, g pg.ProcessGroup, c config, train, test *dataset.Dataset,
	building *sync.Mutex) (result, error) {
	rows := c.batch / g.Size() // this rank's share of each global batch
	building.Lock()
	m, err := newMLP(rows, train.D, c.hidden, train.Classes, c.seed)
	building.Unlock()
	if err != nil {
		return result{}, err
	}
	// Collective: checks that every rank built the same model and copies
	// rank 0's initial values to every rank.
	d, err := ddp.Wrap(ctx, g, m.params, ddp.Options{})
	if err != nil {
		return result{}, err
	}
	building.Lock()
	err = m.forward(d)
	if err == nil {
		_, err = d.Grad(m.loss)
	}
	building.Unlock()
	if err != nil {
		return result{}, err
	}
	vm := G.NewTapeMachine(m.graph)
	defer vm.Close()
	opt, err := optim.New("sgd", c.lr, len(m.params))
	if err != nil {
		return result{}, err
	}
	s, err := sampler.New(train.N, g.Size(), g.Rank(), true, int64(c.seed))
	if err != nil {
		return result{}, err
	}

	var res result
	x, y := make([]float64, rows*train.D), make([]int, rows)
	step := 0
	for epoch := 0; step < c.steps; epoch++ {
		for _, batch := range sampler.Batches(s.Indices(epoch), rows) {
			if step == c.steps || len(batch) < rows {
				break
			}
			train.Gather(batch, x, y)
			if err := m.feed(x, y); err != nil {
				return res, err
			}
			if err := d.RunAll(ctx, vm); err != nil { // forward, backward, averaged gradients
				return res, err
			}
			params, grads, err := d.StepTensors() // every parameter, with its average over ranks
			if err == nil {
				err = opt.Step(params, grads)
			}
			if err != nil {
				return res, err
			}
			loss := m.loss.Value().Data().(float64)
			if step == 0 {
				res.firstLoss = loss
			}
			res.lastLoss = loss
			vm.Reset()
			step++
		}
	}
	if g.Rank() == 0 && c.checkpoint != "" {
		if err := checkpoint.Save(c.checkpoint, checkpoint.Capture(step, checkpoint.Nodes(m.params), opt)); err != nil {
			return res, err
		}
	}
	res.accuracy = m.accuracy(test)
	for i := range m.params {
		res.weights = append(res.weights, checkpoint.Nodes(m.params).Value(i))
	}
	return res, nil
}

// mlp is a one-hidden-layer perceptron, relu, trained on the mean
// squared error against one-hot labels.
type mlp struct {
	graph  *G.ExprGraph
	params G.Nodes // fc1.weight, fc1.bias, fc2.weight, fc2.bias
	x, y   *G.Node
	logits *G.Node
	loss   *G.Node
	rows   int
}

func newMLP(rows, in, hidden, classes int, seed uint64) (*mlp, error) {
	g := G.NewGraph()
	m := &mlp{graph: g, rows: rows}
	m.x = G.NewMatrix(g, tensor.Float64, G.WithShape(rows, in), G.WithName("x"), G.WithInit(G.Zeroes()))
	m.y = G.NewMatrix(g, tensor.Float64, G.WithShape(rows, classes), G.WithName("y"), G.WithInit(G.Zeroes()))
	// Seeded, as torch.manual_seed makes nn.Linear's init: Gorgonia's
	// own initialisers read the clock. (Wrap copies rank 0's values to
	// every rank anyway; the seed makes runs repeatable.)
	rng := rand.New(rand.NewPCG(seed, 0))
	layer := func(name string, fanIn, fanOut int) (w, b *G.Node) {
		bound := 1 / math.Sqrt(float64(fanIn)) // torch.nn.Linear's default
		uniform := func(n int) []float64 {
			v := make([]float64, n)
			for i := range v {
				v[i] = bound * (2*rng.Float64() - 1)
			}
			return v
		}
		w = G.NewMatrix(g, tensor.Float64, G.WithShape(fanIn, fanOut), G.WithName(name+".weight"),
			G.WithValue(tensor.New(tensor.WithShape(fanIn, fanOut), tensor.WithBacking(uniform(fanIn*fanOut)))))
		b = G.NewMatrix(g, tensor.Float64, G.WithShape(1, fanOut), G.WithName(name+".bias"),
			G.WithValue(tensor.New(tensor.WithShape(1, fanOut), tensor.WithBacking(uniform(fanOut)))))
		return w, b
	}
	w1, b1 := layer("fc1", in, hidden)
	w2, b2 := layer("fc2", hidden, classes)
	m.params = G.Nodes{w1, b1, w2, b2}
	return m, nil
}

// forward builds the model with d.Node(i) at each use of parameter i, so
// each gradient's hook fires in backward right after it is computed.
func (m *mlp) forward(d *ddp.DDP) error {
	h, err := G.Mul(m.x, d.Node(0))
	if err == nil {
		h, err = G.BroadcastAdd(h, d.Node(1), nil, []byte{0})
	}
	if err == nil {
		h, err = G.Rectify(h)
	}
	if err == nil {
		h, err = G.Mul(h, d.Node(2))
	}
	if err == nil {
		m.logits, err = G.BroadcastAdd(h, d.Node(3), nil, []byte{0})
	}
	if err != nil {
		return err
	}
	diff, err := G.Sub(m.logits, m.y)
	if err == nil {
		diff, err = G.Square(diff)
	}
	if err == nil {
		m.loss, err = G.Mean(diff)
	}
	return err
}

// feed binds a batch: features, and labels as one-hot rows.
func (m *mlp) feed(x []float64, y []int) error {
	classes := m.y.Shape()[1]
	onehot := make([]float64, len(y)*classes)
	for i, c := range y {
		onehot[i*classes+c] = 1
	}
	if err := G.Let(m.x,
		tensor.New(tensor.WithShape(m.x.Shape()...), tensor.WithBacking(append([]float64(nil), x...)))); err != nil {
		return err
	}
	return G.Let(m.y, tensor.New(tensor.WithShape(m.y.Shape()...), tensor.WithBacking(onehot)))
}

// accuracy classifies test with the trained weights, in plain Go.
func (m *mlp) accuracy(test *dataset.Dataset) float64 {
	w := make([][]float64, len(m.params))
	for i := range m.params {
		w[i] = checkpoint.Nodes(m.params).Value(i)
	}
	in, hidden, classes := test.D, m.params[1].Shape()[1], m.params[3].Shape()[1]
	correct := 0
	h := make([]float64, hidden)
	for n := range test.N {
		x := test.X[n*in : (n+1)*in]
		for j := range hidden {
			s := w[1][j]
			for k := range in {
				s += x[k] * w[0][k*hidden+j]
			}
			h[j] = max(s, 0)
		}
		best, bestScore := 0, 0.0
		for c := range classes {
			s := w[3][c]
			for j := range hidden {
				s += h[j] * w[2][j*classes+c]
			}
			if c == 0 || s > bestScore {
				best, bestScore = c, s
			}
		}
		if best == test.Y[n] {
			correct++
		}
	}
	return float64(correct) / float64(test.N)
}

// identical reports whether every rank ended with rank 0's weights, bit for bit.
func identical(results []result) bool {
	for _, r := range results[1:] {
		for i := range r.weights {
			for k := range r.weights[i] {
				if r.weights[i][k] != results[0].weights[i][k] {
					return false
				}
			}
		}
	}
	return true
}
