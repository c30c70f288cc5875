package layers

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// filled is a tensor of the given shape with values uniform in
// [-1, 1), pushed at least 0.1 away from 0 (ReLU's kink).
func filled(dt tensor.Dtype, seed uint64, shape ...int) *tensor.Dense {
	rng := rand.New(rand.NewPCG(seed, 7))
	v := make([]float64, tensor.Shape(shape).TotalSize())
	for i := range v {
		v[i] = 2*rng.Float64() - 1
		if math.Abs(v[i]) < 0.1 {
			v[i] += math.Copysign(0.1, v[i])
		}
	}
	return fromFloat64s(dt, v, shape...)
}

func fromFloat64s(dt tensor.Dtype, v []float64, shape ...int) *tensor.Dense {
	if dt == tensor.Float32 {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), v...)))
}

func toFloat64s(v gorgonia.Value) []float64 {
	switch d := v.Data().(type) {
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	case []float64:
		return append([]float64(nil), d...)
	case float32:
		return []float64{float64(d)}
	case float64:
		return []float64{d}
	}
	panic(fmt.Sprintf("toFloat64s: %T", v.Data()))
}

// graphCase is a small graph: leaves named in, an output built from them,
// and loss = Σ output ⊙ r for a fixed r, differentiated by every leaf.
type graphCase struct {
	g      *gorgonia.ExprGraph
	leaves gorgonia.Nodes
	out    *gorgonia.Node
	outV   gorgonia.Value // the output, copied by a Read node: the machine may reuse out's register
	loss   *gorgonia.Node
	grads  gorgonia.Nodes
	vm     gorgonia.VM
}

// newCase builds build(leaves) on new leaves holding vals, and its loss.
func newCase(t testing.TB, vals []*tensor.Dense, build func(g *gorgonia.ExprGraph, l gorgonia.Nodes) (*gorgonia.Node,
	error)) *graphCase {
	t.Helper()
	c := &graphCase{g: gorgonia.NewGraph()}
	for i, v := range vals {
		c.leaves = append(c.leaves, gorgonia.NodeFromAny(c.g, v, gorgonia.WithName(fmt.Sprintf("leaf%d", i))))
	}
	var err error
	if c.out, err = build(c.g, c.leaves); err != nil {
		t.Fatal(err)
	}
	gorgonia.Read(c.out, &c.outV)
	r := filled(vals[0].Dtype(), 99, c.out.Shape()...)
	prod, err := gorgonia.HadamardProd(c.out, gorgonia.NodeFromAny(c.g, r, gorgonia.WithName("r")))
	if err != nil {
		t.Fatal(err)
	}
	if c.loss, err = gorgonia.Sum(prod); err != nil {
		t.Fatal(err)
	}
	if c.grads, err = gorgonia.Grad(c.loss, c.leaves...); err != nil {
		t.Fatal(err)
	}
	c.vm = gorgonia.NewTapeMachine(c.g)
	t.Cleanup(func() { c.vm.Close() })
	return c
}

// run runs the machine once and returns the output, the loss and the
// gradients as float64s.
func (c *graphCase) run(t testing.TB) (out []float64, loss float64, grads [][]float64) {
	t.Helper()
	if err := c.vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	defer c.vm.Reset()
	for _, g := range c.grads {
		grads = append(grads, toFloat64s(g.Value()))
	}
	return toFloat64s(c.outV), toFloat64s(c.loss.Value())[0], grads
}

// numericGrads are the central differences of c's loss with respect to
// every leaf value (float64 graphs).
func (c *graphCase) numericGrads(t testing.TB) [][]float64 {
	t.Helper()
	const h = 1e-6
	var grads [][]float64
	for _, l := range c.leaves {
		d := l.Value().Data().([]float64)
		g := make([]float64, len(d))
		for i := range d {
			v := d[i]
			d[i] = v + h
			_, up, _ := c.run(t)
			d[i] = v - h
			_, down, _ := c.run(t)
			d[i] = v
			g[i] = (up - down) / (2 * h)
		}
		grads = append(grads, g)
	}
	return grads
}

// relDiff is max|a−b| / max(max|b|, 1e-300).
func relDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	diff, scale := 0.0, 0.0
	for i := range b {
		diff = max(diff, math.Abs(a[i]-b[i]))
		scale = max(scale, math.Abs(b[i]))
	}
	return diff / max(scale, 1e-300)
}

// tolerance is the relative agreement expected between two ways of
// computing the same products in dt.
func tolerance(dt tensor.Dtype) float64 {
	if dt == tensor.Float32 {
		return 1e-5
	}
	return 1e-12
}

// The pre-layer tanh makes x an op's output, so that Linear builds x's
// gradient, and the leaves' gradients flow through it.
func ourLinear(bias bool) func(*gorgonia.ExprGraph, gorgonia.Nodes) (*gorgonia.Node, error) {
	return func(_ *gorgonia.ExprGraph, l gorgonia.Nodes) (*gorgonia.Node, error) {
		x, err := gorgonia.Tanh(l[0])
		if err != nil {
			return nil, err
		}
		if !bias {
			return Linear(x, l[1], nil)
		}
		return Linear(x, l[1], l[2])
	}
}

func gorgoniaLinear(bias bool) func(*gorgonia.ExprGraph, gorgonia.Nodes) (*gorgonia.Node, error) {
	return func(_ *gorgonia.ExprGraph, l gorgonia.Nodes) (*gorgonia.Node, error) {
		x, err := gorgonia.Tanh(l[0])
		if err != nil {
			return nil, err
		}
		z, err := gorgonia.Mul(x, l[1])
		if err != nil || !bias {
			return z, err
		}
		b, err := gorgonia.Reshape(l[2], tensor.Shape{1, l[2].Shape().TotalSize()})
		if err != nil {
			return nil, err
		}
		return gorgonia.BroadcastAdd(z, b, nil, []byte{0})
	}
}

func linearVals(dt tensor.Dtype, n, in, out int, bias bool) []*tensor.Dense {
	vals := []*tensor.Dense{filled(dt, 1, n, in), filled(dt, 2, in, out)}
	if bias {
		vals = append(vals, filled(dt, 3, out))
	}
	return vals
}

// Linear's output and gradients match Gorgonia's Mul and BroadcastAdd in
// both dtypes, with and without bias, and stay the same on a second run
// (the reused buffers).
func TestLinearMatchesGorgonia(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, bias := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/bias=%t", dt, bias), func(t *testing.T) {
				ours := newCase(t, linearVals(dt, 7, 5, 3, bias), ourLinear(bias))
				ref := newCase(t, linearVals(dt, 7, 5, 3, bias), gorgoniaLinear(bias))
				wantOut, wantLoss, wantGrads := ref.run(t)
				for round := range 2 {
					out, loss, grads := ours.run(t)
					if d := relDiff(out, wantOut); d > tolerance(dt) {
						t.Errorf("round %d: output differs from Gorgonia's by %g", round, d)
					}
					if d := relDiff([]float64{loss}, []float64{wantLoss}); d > tolerance(dt) {
						t.Errorf("round %d: loss %v, Gorgonia's %v", round, loss, wantLoss)
					}
					for i := range grads {
						if d := relDiff(grads[i], wantGrads[i]); d > tolerance(dt) {
							t.Errorf("round %d: gradient of leaf %d differs from Gorgonia's by %g", round, i, d)
						}
					}
				}
			})
		}
	}
}

// Linear's gradients in float64 match central differences.
func TestLinearGradientsMatchFiniteDifferences(t *testing.T) {
	for _, bias := range []bool{true, false} {
		c := newCase(t, linearVals(tensor.Float64, 4, 6, 3, bias), ourLinear(bias))
		_, _, grads := c.run(t)
		num := c.numericGrads(t)
		for i := range grads {
			if d := relDiff(grads[i], num[i]); d > 1e-7 {
				t.Errorf("bias=%t: gradient of leaf %d differs from finite differences by %g", bias, i, d)
			}
		}
	}
}

// A leaf x (a first layer's input) gets no gradient node, so asking for
// one is an error rather than a silent zero.
func TestLinearDoesNotDifferentiateALeafInput(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NodeFromAny(g, filled(tensor.Float64, 1, 2, 3), gorgonia.WithName("x"))
	w := gorgonia.NodeFromAny(g, filled(tensor.Float64, 2, 3, 4), gorgonia.WithName("w"))
	z, err := Linear(x, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	loss, err := gorgonia.Sum(z)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gorgonia.Grad(loss, w); err != nil {
		t.Fatalf("gradient of w: %v", err)
	}
	if _, err := gorgonia.Grad(loss, x); err == nil {
		t.Error("the gradient of a leaf input was built")
	}
}

func TestLinearRejectsBadShapes(t *testing.T) {
	g := gorgonia.NewGraph()
	node := func(dt tensor.Dtype, name string, shape ...int) *gorgonia.Node {
		return gorgonia.NodeFromAny(g, filled(dt, 1, shape...), gorgonia.WithName(name))
	}
	x, w := node(tensor.Float64, "x", 2, 3), node(tensor.Float64, "w", 3, 4)
	for name, args := range map[string][3]*gorgonia.Node{
		"inner sizes": {x, node(tensor.Float64, "w2", 4, 4), nil},
		"bias size":   {x, w, node(tensor.Float64, "b", 3)},
		"dtypes":      {x, node(tensor.Float32, "w3", 3, 4), nil},
		"vector x":    {node(tensor.Float64, "v", 3), w, nil},
		"nil w":       {x, nil, nil},
	} {
		if _, err := Linear(args[0], args[1], args[2]); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// After the first call, the ops write into the same buffers and allocate
// nothing.
func TestOpsAllocateOnlyOnce(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		x, w, b, dz := filled(dt, 1, 8, 5), filled(dt, 2, 5, 3), filled(dt, 3, 3), filled(dt, 4, 8, 3)
		// One op value across calls, as a node keeps its op.
		for _, c := range []struct {
			name string
			op   interface {
				Do(...gorgonia.Value) (gorgonia.Value, error)
			}
			args []gorgonia.Value
		}{
			{"linear", &linearOp{bias: true}, []gorgonia.Value{x, w, b}},
			{"dx", &linearGradOp{}, []gorgonia.Value{dz, w}},
			{"dw", &linearGradOp{weight: true}, []gorgonia.Value{x, dz}},
			{"db", &biasGradOp{}, []gorgonia.Value{dz}},
			{"relu", &actOp{kind: relu}, []gorgonia.Value{x}},
			{"tanh'", &actOp{kind: tanh, grad: true}, []gorgonia.Value{x, x}},
		} {
			name, do, args := c.name, c.op.Do, c.args
			first, err := do(args...)
			if err != nil {
				t.Fatal(err)
			}
			allocs := testing.AllocsPerRun(20, func() {
				v, err := do(args...)
				if err != nil || v != first {
					t.Fatalf("%s: %v, or a new output", name, err)
				}
			})
			if allocs != 0 {
				t.Errorf("%v %s: %v allocations a call", dt, name, allocs)
			}
		}
	}
}

// UsePreallocDo writes into the machine's tensor when it fits, and not
// into one that is also a product's input.
func TestPreallocIsUsedWhenItFits(t *testing.T) {
	x, w := filled(tensor.Float64, 1, 4, 3), filled(tensor.Float64, 2, 3, 2)
	op := &linearOp{}
	p := tensor.New(tensor.WithShape(4, 2), tensor.Of(tensor.Float64))
	if v, err := op.UsePreallocDo(p, x, w); err != nil || v != p {
		t.Errorf("a fitting prealloc was not used: %v", err)
	}
	if v, err := op.UsePreallocDo(tensor.New(tensor.WithShape(2, 4), tensor.Of(tensor.Float64)), x, w); err != nil ||
		!v.Shape().Eq(tensor.Shape{4, 2}) {
		t.Errorf("a misshapen prealloc: %v, %v", v.Shape(), err)
	}
	sq := filled(tensor.Float64, 3, 3, 3)
	if v, err := (&linearGradOp{weight: true}).UsePreallocDo(sq, sq, sq); err != nil || v == sq {
		t.Errorf("a product was written over its own input (%v)", err)
	}
	y := filled(tensor.Float64, 4, 5)
	if v, err := (&actOp{kind: relu}).UsePreallocDo(y, y); err != nil || v != y {
		t.Errorf("an activation did not run in place: %v", err)
	}
}

// Linear and ReLU take what a model feeds them: a batch bound with Let
// every step and the output of Gorgonia's Transpose; values follow the
// batch from step to step.
func TestLinearTakesLetAndTransposedInputs(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(3, 2), gorgonia.WithName("x"))
	w := gorgonia.NodeFromAny(g, filled(tensor.Float64, 2, 3, 4), gorgonia.WithName("w"))
	xt, err := gorgonia.Transpose(x) // [2, 3]
	if err != nil {
		t.Fatal(err)
	}
	z, err := Linear(xt, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if z, err = ReLU(z); err != nil {
		t.Fatal(err)
	}
	var zv gorgonia.Value
	gorgonia.Read(z, &zv)
	if _, err := gorgonia.Grad(gorgonia.Must(gorgonia.Sum(z)), w); err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	wv := w.Value().Data().([]float64)
	for step := range 2 {
		xs := []float64{1, 2, 3, 4, 5, 6}
		xs[step] = -7
		if err := gorgonia.Let(x, tensor.New(tensor.WithShape(3, 2), tensor.WithBacking(xs))); err != nil {
			t.Fatal(err)
		}
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		got := toFloat64s(zv)
		for r := range 2 {
			for c := range 4 {
				want := 0.0
				for k := range 3 {
					want += xs[k*2+r] * wv[k*4+c] // xᵀ[r][k] = x[k][r]
				}
				if want = max(want, 0); math.Abs(got[r*4+c]-want) > 1e-12 {
					t.Errorf("step %d: z[%d][%d] = %v, want %v", step, r, c, got[r*4+c], want)
				}
			}
		}
		vm.Reset()
	}
}
