package gpu_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/tests/testmodel"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// This file is the MLP of the root's Gorgonia tests (mlp_test.go and
// gorgonia_test.go in package ddp), as much of it as
// TestGPUDDPOnNCCLMatchesLocal trains: biases, tanh between layers and
// the mean softmax cross-entropy over the local batch, 8-16-16-4. The GPU
// test compares the NCCL run with the same run on pg/local, both on this
// copy, so it needs nothing else from there.

const (
	paritySteps          = 5 // K
	parityRows           = 4 // B, the local batch
	referenceSeed uint64 = 1
)

// fewBuckets is the root's middle bucket cap: a few buckets for the MLP.
func fewBuckets() ddp.Options { return ddp.Options{BucketCapBytes: 1024, FirstBucketBytes: 256} }

// mlpSizes are the layer widths, input first: 8-16-16-4.
func mlpSizes() []int { return []int{8, 16, 16, 4} }

// mlpSpec describes one model.
type mlpSpec struct {
	sizes []int // layer widths, input first
	rows  int   // the local batch
}

func (s mlpSpec) classes() int { return s.sizes[len(s.sizes)-1] }

// mlp is one replica. params are W1 b1 W2 b2 ...
type mlp[T testmodel.Float] struct {
	spec   mlpSpec
	g      *G.ExprGraph
	x, y   *G.Node // input rows, one-hot labels
	params G.Nodes
	cost   *G.Node
	vm     G.VM
	ddp    *ddp.DDP
}

func dtypeOf[T testmodel.Float]() tensor.Dtype {
	var z T
	if _, ok := any(z).(float32); ok {
		return tensor.Float32
	}
	return tensor.Float64
}

// newMLP builds the graph's inputs and parameters, with values drawn from
// seed, as the root's newMLP does.
func newMLP[T testmodel.Float](t testing.TB, spec mlpSpec, seed uint64) *mlp[T] {
	t.Helper()
	dt := dtypeOf[T]()
	m := &mlp[T]{spec: spec, g: G.NewGraph()}
	in := spec.sizes[0]
	m.x = G.NewMatrix(m.g, dt, G.WithShape(spec.rows, in), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(spec.rows, in), tensor.Of(dt))))
	m.y = G.NewMatrix(m.g, dt, G.WithShape(spec.rows, spec.classes()), G.WithName("y"),
		G.WithValue(tensor.New(tensor.WithShape(spec.rows, spec.classes()), tensor.Of(dt))))
	param := func(name string, r, c int) {
		v := testmodel.Uniform[T](r*c, seed, uint64(len(m.params)), 1/math.Sqrt(float64(max(r, 2))))
		m.params = append(m.params, G.NewMatrix(m.g, dt, G.WithShape(r, c), G.WithName(name),
			G.WithValue(tensor.New(tensor.WithShape(r, c), tensor.WithBacking(v)))))
	}
	for l := 1; l < len(spec.sizes); l++ {
		param(fmt.Sprintf("fc%d.weight", l), spec.sizes[l-1], spec.sizes[l])
		param(fmt.Sprintf("fc%d.bias", l), 1, spec.sizes[l])
	}
	return m
}

// build adds the forward graph through DDP's parameter nodes, the loss
// and the backward graph, and compiles the machine.
func (m *mlp[T]) build(t testing.TB) {
	t.Helper()
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	layers := len(m.spec.sizes) - 1
	h := m.x
	for l := range layers {
		z := must(G.Mul(h, m.ddp.Node(2*l)))
		z = must(G.BroadcastAdd(z, m.ddp.Node(2*l+1), nil, []byte{0}))
		if l == layers-1 {
			h = z
			break
		}
		h = must(G.Tanh(z))
	}
	logp := must(G.LogSoftMax(h))
	perRow := must(G.Sum(must(G.HadamardProd(m.y, logp)), 1))
	m.cost = must(G.Neg(must(G.Mean(perRow))))
	if _, err := m.ddp.Grad(m.cost); err != nil {
		t.Fatal(err)
	}
	m.vm = G.NewTapeMachine(m.g)
	t.Cleanup(func() { m.vm.Close() })
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

// values copies every parameter's value.
func (m *mlp[T]) values() [][]T {
	out := make([][]T, len(m.params))
	for i, p := range m.params {
		out[i] = append([]T(nil), p.Value().Data().([]T)...)
	}
	return out
}

// train runs steps synchronised steps, each on the batch data gives it.
func (m *mlp[T]) train(ctx context.Context, s G.Solver, steps int, data func(step int) batch[T]) error {
	for step := range steps {
		if err := m.feed(data(step)); err != nil {
			return err
		}
		if err := m.ddp.RunAll(ctx, m.vm); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		err := s.Step(m.ddp.ValueGrads())
		m.vm.Reset()
		if err != nil {
			return fmt.Errorf("step %d: solver: %w", step, err)
		}
	}
	return nil
}

// newSolver gives the solvers under test, with the root's settings.
func newSolver(kind string) G.Solver {
	if kind == "adam" {
		return G.NewAdamSolver(G.WithLearnRate(0.01))
	}
	return G.NewVanillaSolver(G.WithLearnRate(0.1))
}

// batch is a batch of rows: inputs and class labels.
type batch[T testmodel.Float] struct {
	x      []T // rows × inputs, row-major
	labels []int
}

// makeBatch draws a deterministic batch of rows; seed picks it.
func makeBatch[T testmodel.Float](spec mlpSpec, rows int, seed uint64) batch[T] {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := batch[T]{x: testmodel.Uniform[T](rows*spec.sizes[0], seed, 8, 1), labels: make([]int, rows)}
	for r := range b.labels {
		b.labels[r] = rng.IntN(spec.classes())
	}
	return b
}

// startReplicas makes one replica per group, rank r's from its own seed,
// wraps each (collective) and builds them one at a time: Gorgonia's
// graph building is not concurrent-safe.
func startReplicas[T testmodel.Float](t *testing.T, ctx context.Context, gs []pg.ProcessGroup, spec mlpSpec,
	opts ddp.Options) []*mlp[T] {
	t.Helper()
	replicas := make([]*mlp[T], len(gs))
	for r := range replicas {
		replicas[r] = newMLP[T](t, spec, referenceSeed+uint64(1000*r))
	}
	if len(gs) > 1 {
		if p, _ := testmodel.FirstBitDiff(replicas[0].values(), replicas[1].values()); p < 0 {
			t.Fatal("ranks 0 and 1 start from the same values: the broadcast would go untested")
		}
	}
	testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
		var err error
		replicas[r].ddp, err = ddp.Wrap(ctx, g, replicas[r].params, opts)
		return err
	}))
	for _, m := range replicas {
		m.build(t)
	}
	return replicas
}
