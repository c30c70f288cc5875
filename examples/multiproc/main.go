// Command multiproc is a program of one's own that trains data-parallel
// with goddp, one rank per process. It is a module of its own, as your
// program would be (go.mod requires github.com/goddp/ddp; the replace
// directive points at this checkout: drop it, and require a released
// version, when you copy the program). It joins its job with
// dist.InitProcessGroup and no options, so the same binary runs unchanged
// under every launcher:
//
//	go build -o multiproc .
//	ddp-train --nproc 2 ./multiproc                                   # ddp-train's own launcher
//	torchrun --nproc_per_node 2 --no_python ./multiproc               # PyTorch's
//	mpirun -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 \
//	    -x GODDP_SECRET=$(openssl rand -hex 32) ./multiproc           # Open MPI's
//	srun -n 2 ./multiproc                                             # Slurm's (GODDP_SECRET exported)
//
// It fits a linear model to a synthetic regression target with SGD. Each
// rank takes its slice of every global batch, so any number of ranks
// computes the same steps as one process on the whole batch, and it
// prints the loss and a digest of the final parameters, which every rank
// and every launcher must agree on.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/optim"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func main() {
	steps := flag.Int("steps", 50, "optimizer steps")
	batch := flag.Int("batch", 32, "global batch size, split evenly over the ranks")
	flag.Parse()
	if err := run(*steps, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "multiproc:", err)
		os.Exit(1)
	}
}

const in, out = 8, 2 // features, targets

func run(steps, batch int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := dist.InitProcessGroup(ctx, dist.Options{}) // whichever launcher started us
	if err != nil {
		return err
	}
	defer g.Close()
	if batch%g.Size() != 0 {
		return fmt.Errorf("--batch %d is not a multiple of the %d ranks", batch, g.Size())
	}
	rows := batch / g.Size()
	m := newModel(rows)
	d, err := ddp.Wrap(ctx, g, m.params, ddp.Options{}) // checks the model on every rank, copies rank 0's values
	if err != nil {
		return err
	}
	if err := m.forward(d); err != nil {
		return err
	}
	if _, err := d.Grad(m.loss); err != nil {
		return err
	}
	vm := G.NewTapeMachine(m.graph)
	defer vm.Close()
	opt, err := optim.New("sgd", 0.05, len(m.params))
	if err != nil {
		return err
	}
	var first, last float64
	for step := range steps {
		x, y := sample(step, batch, g.Rank()*rows, rows) // this rank's slice of the global batch
		if err := G.Let(m.x, tensor.New(tensor.WithShape(rows, in), tensor.WithBacking(x))); err != nil {
			return err
		}
		if err := G.Let(m.y, tensor.New(tensor.WithShape(rows, out), tensor.WithBacking(y))); err != nil {
			return err
		}
		if err := d.RunAll(ctx, vm); err != nil { // forward, backward, gradients averaged over the ranks
			return err
		}
		params, grads, err := d.StepTensors()
		if err == nil {
			err = opt.Step(params, grads)
		}
		if err != nil {
			return err
		}
		if last = m.loss.Value().Data().(float64); step == 0 {
			first = last
		}
		vm.Reset()
	}
	fmt.Printf("rank %d of %d: loss %.6f -> %.6f, params sha256 %s\n", g.Rank(), g.Size(), first, last, digest(m.params))
	return nil
}

type model struct {
	graph      *G.ExprGraph
	params     G.Nodes // weight [in,out], bias [1,out]
	x, y, loss *G.Node
	rows       int
}

func newModel(rows int) *model {
	g := G.NewGraph()
	w := make([]float64, in*out)
	for i := range w {
		w[i] = math.Sin(float64(i)) / 4 // fixed values: every run starts alike
	}
	return &model{
		graph: g, rows: rows,
		x: G.NewMatrix(g, tensor.Float64, G.WithShape(rows, in), G.WithName("x"), G.WithInit(G.Zeroes())),
		y: G.NewMatrix(g, tensor.Float64, G.WithShape(rows, out), G.WithName("y"), G.WithInit(G.Zeroes())),
		params: G.Nodes{
			G.NewMatrix(g, tensor.Float64, G.WithShape(in, out), G.WithName("weight"),
				G.WithValue(tensor.New(tensor.WithShape(in, out), tensor.WithBacking(w)))),
			G.NewMatrix(g, tensor.Float64, G.WithShape(1, out), G.WithName("bias"), G.WithInit(G.Zeroes())),
		},
	}
}

// forward is the mean squared error of x·weight + bias against y, with
// d.Node(i) at each use of parameter i, where its gradient hook goes.
func (m *model) forward(d *ddp.DDP) error {
	p, err := G.Mul(m.x, d.Node(0))
	if err == nil {
		p, err = G.BroadcastAdd(p, d.Node(1), nil, []byte{0})
	}
	if err == nil {
		p, err = G.Sub(p, m.y)
	}
	if err == nil {
		p, err = G.Square(p)
	}
	if err == nil {
		m.loss, err = G.Mean(p)
	}
	return err
}

// sample is rows rows, from row first on, of global batch step: features
// from a fixed sequence, targets a fixed linear function of them.
func sample(step, batch, first, rows int) (x, y []float64) {
	x, y = make([]float64, rows*in), make([]float64, rows*out)
	for r := range rows {
		n := step*batch + first + r
		for k := range in {
			x[r*in+k] = math.Cos(float64(n*in+k) * 0.7)
		}
		for j := range out {
			s := float64(j)
			for k := range in {
				s += x[r*in+k] * float64((k+j)%3-1)
			}
			y[r*out+j] = s
		}
	}
	return x, y
}

// digest is a SHA-256 of the parameters' bits.
func digest(params G.Nodes) string {
	h := sha256.New()
	for _, p := range params {
		for _, v := range p.Value().Data().([]float64) {
			binary.Write(h, binary.LittleEndian, v)
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:12])
}
