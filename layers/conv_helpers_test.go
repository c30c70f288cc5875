package layers_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// randVals returns n uniform values in [-1, 1) from a fixed seed.
func randVals(seed uint64, n int) []float64 {
	r := rand.New(rand.NewPCG(seed, 7))
	v := make([]float64, n)
	for i := range v {
		v[i] = 2*r.Float64() - 1
	}
	return v
}

// tensorOf makes a tensor of dtype dt holding vals.
func tensorOf(dt tensor.Dtype, shape tensor.Shape, vals []float64) *tensor.Dense {
	if dt == tensor.Float32 {
		f := make([]float32, len(vals))
		for i, v := range vals {
			f[i] = float32(v)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), vals...)))
}

// float64s copies a Value's data as float64.
func float64s(t testing.TB, v gorgonia.Value) []float64 {
	t.Helper()
	switch d := v.Data().(type) {
	case []float32:
		o := make([]float64, len(d))
		for i, x := range d {
			o[i] = float64(x)
		}
		return o
	case []float64:
		return append([]float64(nil), d...)
	case float32:
		return []float64{float64(d)}
	case float64:
		return []float64{d}
	}
	t.Fatalf("unexpected data %T", v.Data())
	return nil
}

// assertClose fails where got and want differ by more than tol·(1+|want|).
func assertClose(t testing.TB, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(got[i] - want[i]); !(d <= tol*(1+math.Abs(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v (|Δ| %.3g > tol %.3g)", what, i, got[i], want[i], d, tol)
		}
	}
}

// tolFor is the comparison tolerance for a dtype.
func tolFor(dt tensor.Dtype) float64 {
	if dt == tensor.Float32 {
		return 1e-5
	}
	return 1e-12
}

// run compiles g, runs it once and closes the machine.
func run(t testing.TB, g *gorgonia.ExprGraph) {
	t.Helper()
	vm := gorgonia.NewTapeMachine(g)
	defer func() { _ = vm.Close() }()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
}

// weightedSum is Σ out⊙r for a fixed random r: a cost whose gradient with
// respect to out is r, so every output element's gradient differs.
func weightedSum(t testing.TB, out *gorgonia.Node, seed uint64) *gorgonia.Node {
	t.Helper()
	r := gorgonia.NewConstant(tensorOf(out.Dtype(), out.Shape(), randVals(seed, out.Shape().TotalSize())))
	p, err := gorgonia.HadamardProd(out, r)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gorgonia.Sum(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// must returns n, panicking (failing the test) on a graph-building error.
func must(n *gorgonia.Node, err error) *gorgonia.Node {
	if err != nil {
		panic(err)
	}
	return n
}
