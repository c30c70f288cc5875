package ddp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/autogradhooks"
	"github.com/goddp/ddp/pg"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// This file builds the model of the Gorgonia tests: an MLP with biases,
// tanh between layers and the mean softmax cross-entropy over the local
// batch, in float32 or float64. The same builder gives the plain,
// single-process reference and the DDP replicas, so the two differ only
// in the wrapper.
//
// Because the loss is a mean over the local batch, the average over N
// ranks of their local-mean gradients, on equal shards, is the mean
// gradient of the whole N·B batch: DDP on N ranks must track one process
// trained on the concatenated batch.

type float interface{ float32 | float64 }

func dtypeOf[T float]() tensor.Dtype {
	var z T
	if _, ok := any(z).(float32); ok {
		return tensor.Float32
	}
	return tensor.Float64
}

// mlpSizes are the layer widths, input first: 8-16-16-4.
func mlpSizes() []int { return []int{8, 16, 16, 4} }

// mlpSpec describes one model.
type mlpSpec struct {
	sizes []int // layer widths, input first
	rows  int   // the local batch
	// extra adds a last parameter, "side.weight", on a branch off the last
	// hidden layer that the loss never reaches.
	extra bool
	// probe, if set, is applied to each layer's pre-activation, layer 1
	// first, as the forward graph is built.
	probe func(layer int, z *G.Node) (*G.Node, error)
}

func (s mlpSpec) classes() int { return s.sizes[len(s.sizes)-1] }

// mlp is one replica. params are W1 b1 W2 b2 ... then side.weight.
type mlp[T float] struct {
	spec   mlpSpec
	g      *G.ExprGraph
	x, y   *G.Node // input rows, one-hot labels
	params G.Nodes
	cost   *G.Node
	grads  G.Nodes // grads[i] is nil for a parameter the loss does not reach
	vm     G.VM
	ddp    *DDP // nil for the plain model
}

// newMLP builds the graph's inputs and parameters, with values drawn from
// seed: every seed gives a different model. It builds no forward graph:
// wrap it first, if it is to be a replica, then call build.
func newMLP[T float](t testing.TB, spec mlpSpec, seed uint64) *mlp[T] {
	t.Helper()
	dt := dtypeOf[T]()
	m := &mlp[T]{spec: spec, g: G.NewGraph()}
	in := spec.sizes[0]
	m.x = G.NewMatrix(m.g, dt, G.WithShape(spec.rows, in), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(spec.rows, in), tensor.Of(dt))))
	m.y = G.NewMatrix(m.g, dt, G.WithShape(spec.rows, spec.classes()), G.WithName("y"),
		G.WithValue(tensor.New(tensor.WithShape(spec.rows, spec.classes()), tensor.Of(dt))))
	param := func(name string, r, c int) {
		v := uniform[T](r*c, seed, uint64(len(m.params)), 1/math.Sqrt(float64(max(r, 2))))
		m.params = append(m.params, G.NewMatrix(m.g, dt, G.WithShape(r, c), G.WithName(name),
			G.WithValue(tensor.New(tensor.WithShape(r, c), tensor.WithBacking(v)))))
	}
	for l := 1; l < len(spec.sizes); l++ {
		param(fmt.Sprintf("fc%d.weight", l), spec.sizes[l-1], spec.sizes[l])
		param(fmt.Sprintf("fc%d.bias", l), 1, spec.sizes[l])
	}
	if spec.extra {
		param("side.weight", spec.sizes[len(spec.sizes)-2], 2)
	}
	return m
}

// wrap makes m a DDP replica. It is collective.
func (m *mlp[T]) wrap(ctx context.Context, g pg.ProcessGroup, opts Options) error {
	d, err := Wrap(ctx, g, m.params, opts)
	m.ddp = d
	return err
}

// build adds the forward graph, the loss and the backward graph, and
// compiles the machine. A replica asks DDP for each parameter where the
// layer uses it, as DDP requires. Graph errors fail t; the error returned
// is the gradient's (DDP refuses unused parameters without
// FindUnusedParameters). Build graphs one at a time: Gorgonia's graph
// construction is not safe for concurrent use.
func (m *mlp[T]) build(t testing.TB) error {
	t.Helper()
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	param := func(i int) *G.Node { return m.params[i] }
	if m.ddp != nil {
		param = m.ddp.Node
	}
	layers := len(m.spec.sizes) - 1
	h := m.x
	for l := range layers {
		z := must(G.Mul(h, param(2*l)))
		z = must(G.BroadcastAdd(z, param(2*l+1), nil, []byte{0}))
		if m.spec.probe != nil {
			z = must(m.spec.probe(l+1, z))
		}
		if l == layers-1 {
			h = z
			break
		}
		h = must(G.Tanh(z))
		if m.spec.extra && l == layers-2 {
			must(G.Mul(h, param(2*layers))) // computed, but no part of the loss
		}
	}
	logp := must(G.LogSoftMax(h))
	perRow := must(G.Sum(must(G.HadamardProd(m.y, logp)), 1))
	m.cost = must(G.Neg(must(G.Mean(perRow))))
	var err error
	if m.ddp != nil {
		m.grads, err = m.ddp.Grad(m.cost)
	} else {
		m.grads, _, err = autogradhooks.Grad(m.cost, m.params)
	}
	if err != nil {
		return err
	}
	m.vm = G.NewTapeMachine(m.g)
	t.Cleanup(func() { m.vm.Close() })
	return nil
}

// mustBuild is build for models whose gradient must succeed.
func (m *mlp[T]) mustBuild(t testing.TB) *mlp[T] {
	t.Helper()
	if err := m.build(t); err != nil {
		t.Fatal(err)
	}
	return m
}

// feed binds a batch to the inputs.
func (m *mlp[T]) feed(b batch[T]) error {
	in, c := m.spec.sizes[0], m.spec.classes()
	if len(b.labels) != m.spec.rows {
		return fmt.Errorf("feed: %d rows for a model of batch %d", len(b.labels), m.spec.rows)
	}
	y := make([]T, m.spec.rows*c)
	for r, class := range b.labels {
		y[r*c+class] = 1
	}
	if err := G.Let(m.x, tensor.New(tensor.WithShape(m.spec.rows, in), tensor.WithBacking(b.x))); err != nil {
		return err
	}
	return G.Let(m.y, tensor.New(tensor.WithShape(m.spec.rows, c), tensor.WithBacking(y)))
}

// run is one forward and backward pass: DDP's synchronised RunAll, or
// for the plain model the machine's own.
func (m *mlp[T]) run(ctx context.Context) error {
	if m.ddp == nil {
		return m.vm.RunAll()
	}
	return m.ddp.RunAll(ctx, m.vm)
}

// step steps the solver over the parameters that have gradients, then
// resets the machine for the next run.
func (m *mlp[T]) step(s G.Solver) error {
	var vg []G.ValueGrad
	if m.ddp != nil {
		vg = m.ddp.ValueGrads()
	} else {
		vg = G.NodesToValueGrads(m.used())
	}
	err := s.Step(vg)
	m.vm.Reset()
	return err
}

func (m *mlp[T]) used() G.Nodes {
	var out G.Nodes
	for i, p := range m.params {
		if m.grads[i] != nil {
			out = append(out, p)
		}
	}
	return out
}

// values copies every parameter's value.
func (m *mlp[T]) values() [][]T {
	out := make([][]T, len(m.params))
	for i, p := range m.params {
		out[i] = append([]T(nil), p.Value().Data().([]T)...)
	}
	return out
}

// gradients copies the gradient of every parameter the loss reaches (nil
// for the others).
func (m *mlp[T]) gradients() [][]T {
	out := make([][]T, len(m.params))
	for i, gr := range m.grads {
		if gr != nil {
			out[i] = append([]T(nil), gr.Value().Data().([]T)...)
		}
	}
	return out
}

// train runs steps synchronised steps, each on the batch data gives it.
func (m *mlp[T]) train(ctx context.Context, s G.Solver, steps int, data func(step int) batch[T]) error {
	for step := range steps {
		if err := m.feed(data(step)); err != nil {
			return err
		}
		if err := m.run(ctx); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if err := m.step(s); err != nil {
			return fmt.Errorf("step %d: solver: %w", step, err)
		}
	}
	return nil
}

// newSolver gives the solvers under test, with the same settings for the
// replicas and the reference.
func newSolver(kind string) G.Solver {
	if kind == "adam" {
		return G.NewAdamSolver(G.WithLearnRate(0.01))
	}
	return G.NewVanillaSolver(G.WithLearnRate(0.1))
}

// batch is a batch of rows: inputs and class labels.
type batch[T float] struct {
	x      []T // rows × inputs, row-major
	labels []int
}

// makeBatch draws a deterministic batch of rows; seed picks it.
func makeBatch[T float](spec mlpSpec, rows int, seed uint64) batch[T] {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := batch[T]{x: uniform[T](rows*spec.sizes[0], seed, 8, 1), labels: make([]int, rows)}
	for r := range b.labels {
		b.labels[r] = rng.IntN(spec.classes())
	}
	return b
}

// shard is rows [k·rows, (k+1)·rows) of b.
func (b batch[T]) shard(k, rows int) batch[T] {
	in := len(b.x) / len(b.labels)
	return batch[T]{x: b.x[k*rows*in : (k+1)*rows*in], labels: b.labels[k*rows : (k+1)*rows]}
}

// uniform draws n values in [-scale, scale) from the stream (seed, stream).
func uniform[T float](n int, seed, stream uint64, scale float64) []T {
	rng := rand.New(rand.NewPCG(seed, stream))
	out := make([]T, n)
	for k := range out {
		out[k] = T(scale * (2*rng.Float64() - 1))
	}
	return out
}

// firstBitDiff returns the first parameter and element at which a and b
// differ bitwise, or -1, -1.
func firstBitDiff[T float](a, b [][]T) (param, elem int) {
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return i, 0
		}
		for k := range a[i] {
			if math.Float64bits(float64(a[i][k])) != math.Float64bits(float64(b[i][k])) {
				return i, k
			}
		}
	}
	return -1, -1
}

// relErr is the worst, over parameters, of max|got-want| / max|want|.
// Parameters with no values on either side are skipped.
func relErr[T float](got, want [][]T) float64 {
	worst := 0.0
	for i := range want {
		if len(got[i]) != len(want[i]) {
			return math.Inf(1)
		}
		diff, scale := 0.0, 0.0
		for k := range want[i] {
			diff = max(diff, math.Abs(float64(got[i][k])-float64(want[i][k])))
			scale = max(scale, math.Abs(float64(want[i][k])))
		}
		if diff > 0 {
			worst = max(worst, diff/max(scale, math.SmallestNonzeroFloat64))
		}
	}
	return worst
}
