package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/autogradhooks"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// graphMu serialises graph construction: Gorgonia's is not safe for
// concurrent use, and local ranks are goroutines of one process.
var graphMu sync.Mutex

// model is one replica of the benchmark's MLP: float32, biases, relu
// between the layers, the mean softmax cross-entropy over the batch.
type model struct {
	sizes  []int // layer widths, input first
	rows   int   // the batch
	g      *G.ExprGraph
	x, y   *G.Node
	params G.Nodes // fc1.weight, fc1.bias, fc2.weight, ...
	vm     G.VM
	ddp    *ddp.DDP // nil for the plain model
	solver G.Solver
	// backward is called by the tape when backward starts.
	backward func()
}

// newModel creates the inputs and the parameters, with values drawn from
// seed (He-uniform weights, zero biases). It builds no graph yet: a DDP
// replica is wrapped between newModel and build.
func newModel(sizes []int, rows int, seed uint64) *model {
	graphMu.Lock()
	defer graphMu.Unlock()
	m := &model{sizes: sizes, rows: rows, g: G.NewGraph(), solver: G.NewVanillaSolver(G.WithLearnRate(1e-3))}
	classes := sizes[len(sizes)-1]
	m.x = G.NewMatrix(m.g, tensor.Float32, G.WithShape(rows, sizes[0]), G.WithName("x"))
	m.y = G.NewMatrix(m.g, tensor.Float32, G.WithShape(rows, classes), G.WithName("y"))
	rng := rand.New(rand.NewPCG(seed, 1))
	for l := 1; l < len(sizes); l++ {
		in, out := sizes[l-1], sizes[l]
		w := make([]float32, in*out)
		scale := math.Sqrt(6 / float64(in))
		for k := range w {
			w[k] = float32(scale * (2*rng.Float64() - 1))
		}
		m.params = append(m.params,
			G.NewMatrix(m.g, tensor.Float32, G.WithShape(in, out), G.WithName(fmt.Sprintf("fc%d.weight", l)),
				G.WithValue(tensor.New(tensor.WithShape(in, out), tensor.WithBacking(w)))),
			G.NewMatrix(m.g, tensor.Float32, G.WithShape(1, out), G.WithName(fmt.Sprintf("fc%d.bias", l)),
				G.WithValue(tensor.New(tensor.WithShape(1, out), tensor.Of(tensor.Float32)))))
	}
	return m
}

// build adds the forward graph, the loss and the backward graph, and
// compiles the machine. A DDP replica takes each parameter from d.Node(i)
// where its layer uses it, so its hook fires as soon as its gradient
// exists. The loss passes through a mark whose gradient calls m.backward:
// the first node backward runs.
func (m *model) build(d *ddp.DDP) error {
	graphMu.Lock()
	defer graphMu.Unlock()
	m.ddp = d
	param := func(i int) *G.Node { return m.params[i] }
	if d != nil {
		param = d.Node
	}
	h := m.x
	layers := len(m.sizes) - 1
	for l := range layers {
		z, err := G.Mul(h, param(2*l))
		if err != nil {
			return err
		}
		if z, err = G.BroadcastAdd(z, param(2*l+1), nil, []byte{0}); err != nil {
			return err
		}
		if l == layers-1 {
			h = z
			break
		}
		if h, err = G.Rectify(z); err != nil {
			return err
		}
	}
	cost, err := crossEntropy(h, m.y)
	if err != nil {
		return err
	}
	if cost, err = autogradhooks.MarkBackward(cost, m.backward); err != nil {
		return err
	}
	if d != nil {
		_, err = d.Grad(cost)
	} else {
		_, err = G.Grad(cost, m.params...)
	}
	if err != nil {
		return err
	}
	m.vm = G.NewTapeMachine(m.g)
	return nil
}

// crossEntropy is the mean over rows of −Σ y·log softmax(logits).
func crossEntropy(logits, y *G.Node) (*G.Node, error) {
	logp, err := G.LogSoftMax(logits)
	if err != nil {
		return nil, err
	}
	prod, err := G.HadamardProd(y, logp)
	if err != nil {
		return nil, err
	}
	perRow, err := G.Sum(prod, 1)
	if err != nil {
		return nil, err
	}
	mean, err := G.Mean(perRow)
	if err != nil {
		return nil, err
	}
	return G.Neg(mean)
}

// batch is a fixed batch of inputs and one-hot labels.
type batch struct{ x, y tensor.Tensor }

// makeBatch draws a batch from seed: inputs in [0, 1), random classes.
func makeBatch(sizes []int, rows int, seed uint64) batch {
	rng := rand.New(rand.NewPCG(seed, 2))
	in, classes := sizes[0], sizes[len(sizes)-1]
	x := make([]float32, rows*in)
	for k := range x {
		x[k] = rng.Float32()
	}
	y := make([]float32, rows*classes)
	for r := range rows {
		y[r*classes+rng.IntN(classes)] = 1
	}
	return batch{
		x: tensor.New(tensor.WithShape(rows, in), tensor.WithBacking(x)),
		y: tensor.New(tensor.WithShape(rows, classes), tensor.WithBacking(y)),
	}
}

// feed binds b to the inputs.
func (m *model) feed(b batch) error {
	if err := G.Let(m.x, b.x); err != nil {
		return err
	}
	return G.Let(m.y, b.y)
}

// finish steps the solver and resets the machine for the next step.
func (m *model) finish() error {
	vg := G.NodesToValueGrads(m.params)
	if m.ddp != nil {
		vg = m.ddp.ValueGrads()
	}
	err := m.solver.Step(vg)
	m.vm.Reset()
	return err
}

func (m *model) close() {
	if m.vm != nil {
		m.vm.Close()
	}
}
