package autogradhooks

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// This file builds the test model: an MLP with biases and tanh, a mean
// squared error, deterministic values, float32 or float64.

type float interface{ float32 | float64 }

// mlpSizes gives a 4-layer MLP: params are W1 b1 W2 b2 W3 b3 W4 b4, so
// parameter i belongs to layer i/2.
var mlpSizes = []int{5, 4, 4, 3, 2}

const mlpBatch = 3

type mlp struct {
	g      *G.ExprGraph
	x, y   *G.Node
	params G.Nodes // raw parameters: W1 b1 W2 b2 ...
	cost   *G.Node
	grads  G.Nodes // gorgonia.Grad(cost, params...)
	set    *Set    // nil for a plain model
}

func layerOf(param int) int { return param/2 + 1 }

func dtypeOf[T float]() tensor.Dtype {
	var z T
	if _, ok := any(z).(float32); ok {
		return tensor.Float32
	}
	return tensor.Float64
}

// fill returns n deterministic values in about [-0.8, 0.8] that depend on
// seed, so every parameter and every batch differs.
func fill[T float](n int, seed float64) []T {
	out := make([]T, n)
	for k := range out {
		out[k] = T(0.8 * math.Sin(seed*1.7+float64(k)*0.61))
	}
	return out
}

func matrix[T float](r, c int, seed float64) *tensor.Dense {
	return tensor.New(tensor.WithShape(r, c), tensor.WithBacking(fill[T](r*c, seed)))
}

// wrapping says how buildMLP uses the parameters.
type wrapping int

const (
	plain   wrapping = iota // raw parameters, no hooks
	atUse                   // Set.Node(i) where parameter i is used (the documented way)
	upFront                 // Set.Nodes() before the forward graph is built
)

// buildMLP builds the model. Unless w is plain, the parameters are wrapped
// by New(params, fn). Either way the gradients are gorgonia.Grad's, taken
// with respect to the raw parameters.
func buildMLP[T float](t testing.TB, w wrapping, fn Func) *mlp {
	t.Helper()
	dt := dtypeOf[T]()
	m := &mlp{g: G.NewGraph()}
	in, out := mlpSizes[0], mlpSizes[len(mlpSizes)-1]
	m.x = G.NewMatrix(m.g, dt, G.WithShape(mlpBatch, in), G.WithName("x"), G.WithValue(matrix[T](mlpBatch, in, 100)))
	m.y = G.NewMatrix(m.g, dt, G.WithShape(mlpBatch, out), G.WithName("y"), G.WithValue(matrix[T](mlpBatch, out, 200)))
	for l := 1; l < len(mlpSizes); l++ {
		r, c := mlpSizes[l-1], mlpSizes[l]
		w := G.NewMatrix(m.g, dt, G.WithShape(r, c), G.WithName(name("W", l)), G.WithValue(matrix[T](r, c, float64(2*l))))
		b := G.NewMatrix(m.g, dt, G.WithShape(1, c), G.WithName(name("b", l)), G.WithValue(matrix[T](1, c, float64(2*l+1))))
		m.params = append(m.params, w, b)
	}
	param := func(i int) *G.Node { return m.params[i] }
	if w != plain {
		s, err := New(m.params, fn)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		m.set, param = s, s.Node
		if w == upFront {
			wrapped := s.Nodes()
			param = func(i int) *G.Node { return wrapped[i] }
		}
	}
	h := m.x
	for i := 0; i < len(m.params); i += 2 {
		z := must(t)(G.Mul(h, param(i)))
		z = must(t)(G.BroadcastAdd(z, param(i+1), nil, []byte{0}))
		h = z
		if i+2 < len(m.params) {
			h = must(t)(G.Tanh(z))
		}
	}
	m.cost = must(t)(G.Mean(must(t)(G.Square(must(t)(G.Sub(h, m.y))))))
	grads, err := G.Grad(m.cost, m.params...)
	if err != nil {
		t.Fatalf("Grad: %v", err)
	}
	m.grads = grads
	return m
}

// setInput binds iteration iter's batch to x.
func (m *mlp) setInput(t testing.TB, iter int) {
	t.Helper()
	var x *tensor.Dense
	if m.x.Dtype() == tensor.Float32 {
		x = matrix[float32](mlpBatch, mlpSizes[0], 100+float64(iter))
	} else {
		x = matrix[float64](mlpBatch, mlpSizes[0], 100+float64(iter))
	}
	if err := G.Let(m.x, x); err != nil {
		t.Fatalf("Let x: %v", err)
	}
}

func name(prefix string, l int) string { return prefix + string(rune('0'+l)) }

func must(t testing.TB) func(*G.Node, error) *G.Node {
	return func(n *G.Node, err error) *G.Node {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

// data returns the elements of a float tensor or scalar, as float32s or
// float64s.
func data(t testing.TB, v G.Value) any {
	t.Helper()
	switch x := v.(type) {
	case *tensor.Dense:
		switch d := x.Data().(type) {
		case []float32, []float64:
			return d
		case float32:
			return []float32{d}
		case float64:
			return []float64{d}
		}
	case *G.F32:
		return []float32{float32(*x)}
	case *G.F64:
		return []float64{float64(*x)}
	}
	t.Fatalf("value %v (%T) holds no floats", v, v)
	return nil
}

// bits returns the IEEE bit patterns of a float value, so gradients can be
// compared bitwise whatever their dtype.
func bits(t testing.TB, v G.Value) []uint64 {
	t.Helper()
	var out []uint64
	switch d := data(t, v).(type) {
	case []float32:
		for _, f := range d {
			out = append(out, uint64(math.Float32bits(f)))
		}
	case []float64:
		for _, f := range d {
			out = append(out, math.Float64bits(f))
		}
	}
	return out
}

// floats returns a float value's elements as float64s (a copy).
func floats(t testing.TB, v G.Value) []float64 {
	t.Helper()
	var out []float64
	switch d := data(t, v).(type) {
	case []float32:
		for _, f := range d {
			out = append(out, float64(f))
		}
	case []float64:
		out = append(out, d...)
	}
	return out
}

// setFloats overwrites a float tensor's elements in place.
func setFloats(t testing.TB, v G.Value, vals []float64) {
	t.Helper()
	switch d := data(t, v).(type) {
	case []float32:
		for k := range d {
			d[k] = float32(vals[k])
		}
	case []float64:
		copy(d, vals)
	}
}
