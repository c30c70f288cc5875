package testmodel

import (
	"fmt"
	"testing"

	"github.com/goddp/ddp"
	"github.com/goddp/ddp/autogradhooks"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The branch model: h = tanh(x·W1 + b1), then two heads of the same shape,
// fc2(h) = h·W2 + b2 and fc3(h) = h·W3 + b3, combined by the rank's head.
const (
	BranchIn      = 6
	BranchHidden  = 5
	BranchClasses = 3
	BranchRows    = 4
	BranchSteps   = 4
)

// The heads a rank can build.
const (
	HeadSum    = "sum"    // fc2(h) + fc3(h): the gradients of W2/W3 and of b2/b3 are one node each
	HeadSumX1  = "sum×1"  // fc2(h) + fc3(h)·1: the same values, with no node in common
	HeadFC2    = "fc2"    // fc2(h): fc3 unused
	HeadFC3    = "fc3"    // fc3(h): fc2 unused
	HeadConcat = "concat" // rows of fc2(h) stacked on rows of fc3(h)
	HeadShared = "shared" // fc2(h) + fc3(h) + fc2(h)·fc3's shape again: W2 used twice
	HeadTrunk  = "trunk"  // fc2(tanh(x·W1+b1)) + fc3(tanh(x·W1+b1)) with the trunk built twice
)

// BranchNames are the parameters, in order.
func BranchNames() []string {
	return []string{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}
}

// Branch is one replica of the branch model, or the plain model when DDP
// is nil.
type Branch struct {
	Head   string
	DT     tensor.Dtype // tensor.Float64, or tensor.Float32
	G      *G.ExprGraph
	X, Y   *G.Node
	Params G.Nodes
	Cost   *G.Node
	Grads  G.Nodes
	VM     G.VM
	DDP    *ddp.DDP
}

// NewBranch is a float64 branch model with head, its values drawn from seed.
func NewBranch(t testing.TB, head string, seed uint64) *Branch {
	return NewBranchOf(t, head, seed, tensor.Float64)
}

// NewBranchOf is NewBranch in dtype dt. Its values, inputs and
// gradients go in and out as float64 (Values, Feed, LocalGrads), which
// holds float32 exactly.
func NewBranchOf(t testing.TB, head string, seed uint64, dt tensor.Dtype) *Branch {
	t.Helper()
	m := &Branch{Head: head, DT: dt, G: G.NewGraph()}
	rows := BranchRows
	m.X = G.NewMatrix(m.G, dt, G.WithShape(rows, BranchIn), G.WithName("x"),
		G.WithValue(tensor.New(tensor.WithShape(rows, BranchIn), tensor.Of(dt))))
	yRows := rows
	if head == HeadConcat {
		yRows = 2 * rows
	}
	m.Y = G.NewMatrix(m.G, dt, G.WithShape(yRows, BranchClasses), G.WithName("y"),
		G.WithValue(tensor.New(tensor.WithShape(yRows, BranchClasses), tensor.Of(dt))))
	shapes := [][2]int{{BranchIn, BranchHidden}, {1, BranchHidden}, {BranchHidden, BranchClasses}, {1, BranchClasses},
		{BranchHidden, BranchClasses}, {1, BranchClasses}}
	names := BranchNames()
	for i, s := range shapes {
		v := Uniform[float64](s[0]*s[1], seed, uint64(i), 0.7)
		m.Params = append(m.Params, G.NewMatrix(m.G, dt, G.WithShape(s[0], s[1]), G.WithName(names[i]),
			G.WithValue(tensor.New(tensor.WithShape(s[0], s[1]), tensor.WithBacking(AsDtype(dt, v))))))
	}
	return m
}

// AsDtype is v as the backing of a tensor of dtype dt: v itself for
// float64, a rounded copy for float32.
func AsDtype(dt tensor.Dtype, v []float64) any {
	if dt != tensor.Float32 {
		return v
	}
	out := make([]float32, len(v))
	for k, x := range v {
		out[k] = float32(x)
	}
	return out
}

// Float64s copies a tensor's []float64 or []float32 data as float64.
func Float64s(data any) []float64 {
	switch d := data.(type) {
	case []float64:
		return append([]float64(nil), d...)
	case []float32:
		out := make([]float64, len(d))
		for k, x := range d {
			out[k] = float64(x)
		}
		return out
	}
	panic(fmt.Sprintf("float64s: data of type %T", data))
}

// SetFloat64s copies v into a tensor's []float64 or []float32 data.
func SetFloat64s(data any, v []float64) {
	switch d := data.(type) {
	case []float64:
		copy(d, v)
	case []float32:
		for k := range d {
			d[k] = float32(v[k])
		}
	default:
		panic(fmt.Sprintf("setFloat64s: data of type %T", data))
	}
}

// Build adds the forward graph of m's head, the loss and the backward
// graph. With a DDP wrapper the parameters are taken from d.Node.
func (m *Branch) Build(t testing.TB) error {
	t.Helper()
	must := func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	param := func(i int) *G.Node { return m.Params[i] }
	if m.DDP != nil {
		param = m.DDP.Node
	}
	trunk := func() *G.Node {
		z := must(G.Mul(m.X, param(0)))
		return must(G.Tanh(must(G.BroadcastAdd(z, param(1), nil, []byte{0}))))
	}
	h := trunk()
	fc := func(k int, in *G.Node) *G.Node { // k = 2 or 3
		z := must(G.Mul(in, param(2*k-2)))
		return must(G.BroadcastAdd(z, param(2*k-1), nil, []byte{0}))
	}
	var logits *G.Node
	switch m.Head {
	case HeadSum:
		logits = must(G.Add(fc(2, h), fc(3, h)))
	case HeadSumX1:
		var one *G.Node
		if m.DT == tensor.Float32 {
			one = G.NewConstant(float32(1))
		} else {
			one = G.NewConstant(float64(1))
		}
		logits = must(G.Add(fc(2, h), must(G.Mul(fc(3, h), one))))
	case HeadFC2:
		logits = fc(2, h)
	case HeadFC3:
		logits = fc(3, h)
	case HeadConcat:
		logits = must(G.Concat(0, fc(2, h), fc(3, h)))
	case HeadShared:
		logits = must(G.Add(must(G.Add(fc(2, h), fc(3, h))), fc(2, h)))
	case HeadTrunk:
		logits = must(G.Add(fc(2, h), fc(3, trunk())))
	default:
		t.Fatalf("no head %q", m.Head)
	}
	logp := must(G.LogSoftMax(logits))
	perRow := must(G.Sum(must(G.HadamardProd(m.Y, logp)), 1))
	m.Cost = must(G.Neg(must(G.Mean(perRow))))
	var err error
	if m.DDP != nil {
		m.Grads, err = m.DDP.Grad(m.Cost)
	} else {
		m.Grads, _, err = autogradhooks.Grad(m.Cost, m.Params)
	}
	if err != nil {
		return err
	}
	m.VM = G.NewTapeMachine(m.G)
	t.Cleanup(func() { m.VM.Close() })
	return nil
}

// BranchBatch is rank's batch at step: rows × inputs, and one-hot labels.
func BranchBatch(step, rank int) (x, y []float64) {
	bx, labels := batchOf(BranchIn, BranchClasses, BranchRows, uint64(1000*step+rank+1))
	y = make([]float64, BranchRows*BranchClasses)
	for r, c := range labels {
		y[r*BranchClasses+c] = 1
	}
	return bx, y
}

// Feed binds rank's batch at step.
func (m *Branch) Feed(step, rank int) error {
	x, y := BranchBatch(step, rank)
	if m.Head == HeadConcat {
		y = append(y, y...)
	}
	yRows := len(y) / BranchClasses
	xt := tensor.New(tensor.WithShape(BranchRows, BranchIn), tensor.WithBacking(AsDtype(m.DT, x)))
	if err := G.Let(m.X, xt); err != nil {
		return err
	}
	return G.Let(m.Y, tensor.New(tensor.WithShape(yRows, BranchClasses), tensor.WithBacking(AsDtype(m.DT, y))))
}

// Values copies every parameter's value, as float64.
func (m *Branch) Values() [][]float64 {
	out := make([][]float64, len(m.Params))
	for i, p := range m.Params {
		out[i] = Float64s(p.Value().Data())
	}
	return out
}

// SetValues sets every parameter's value.
func (m *Branch) SetValues(v [][]float64) {
	for i, p := range m.Params {
		SetFloat64s(p.Value().Data(), v[i])
	}
}

// LocalGrads runs the plain model once (its graph must be the rank's) at
// values and returns every parameter's gradient: zeros where the graph
// does not reach it.
func (m *Branch) LocalGrads(values [][]float64, step, rank int) ([][]float64, error) {
	m.SetValues(values)
	if err := m.Feed(step, rank); err != nil {
		return nil, err
	}
	defer m.VM.Reset()
	if err := m.VM.RunAll(); err != nil {
		return nil, err
	}
	out := make([][]float64, len(m.Params))
	for i, g := range m.Grads {
		if g != nil {
			out[i] = Float64s(g.Value().Data())
		} else {
			out[i] = make([]float64, len(values[i]))
		}
	}
	return out, nil
}
