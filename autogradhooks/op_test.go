package autogradhooks

import (
	"math"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestHookHashesAreDistinct: the graph hash-conses nodes by op hash, so two
// hooks must hash differently whenever index, name or Set differ.
func TestHookHashesAreDistinct(t *testing.T) {
	s1, s2 := &Set{}, &Set{}
	ops := []G.Op{
		&paramHook{set: s1, idx: 0, name: "W"},
		&paramHook{set: s1, idx: 1, name: "W"},
		&paramHook{set: s1, idx: 0, name: "b"},
		&paramHook{set: s2, idx: 0, name: "W"},
		&gradHook{set: s1, idx: 0, name: "W"},
		&gradHook{set: s1, idx: 1, name: "W"},
		&gradHook{set: s1, idx: 0, name: "b"},
		&gradHook{set: s2, idx: 0, name: "W"},
	}
	seen := map[uint32]G.Op{}
	for _, op := range ops {
		h := op.Hashcode()
		if prev, dup := seen[h]; dup {
			t.Errorf("%v and %v share hash %#x", prev, op, h)
		}
		seen[h] = op
	}
	if a, b := (&gradHook{set: s1, idx: 3, name: "W"}), (&gradHook{set: s1, idx: 3,
		name: "W"}); a.Hashcode() != b.Hashcode() {
		t.Error("equal hooks hash differently")
	}
}

// TestSameGradientExpressionKeepsTwoHooks: in sum(a + b) the gradients of
// a and b are one node, so only the index in the hook's hash keeps the
// two hooks on it apart.
func TestSameGradientExpressionKeepsTwoHooks(t *testing.T) {
	g := G.NewGraph()
	a := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 2), G.WithName("a"), G.WithValue(matrix[float64](2, 2, 1)))
	b := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 2), G.WithName("b"), G.WithValue(matrix[float64](2, 2, 2)))
	var fired []int
	s, err := New(G.Nodes{a, b}, func(i int, _ G.Value) error {
		fired = append(fired, i)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cost := must(t)(G.Sum(must(t)(G.Add(s.Node(0), s.Node(1)))))
	grads, _, err := s.Grad(cost)
	if err != nil {
		t.Fatal(err)
	}
	if pa, pb := childrenOf(g, grads[0]), childrenOf(g, grads[1]); pa[0] != pb[0] {
		t.Fatalf("precondition: the gradients of a and b are different nodes (%v, %v), so this test proves nothing", pa[0],
			pb[0])
	}
	if grads[0] == grads[1] {
		t.Fatal("the hooks of a and b were merged into one node")
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := RunAll(vm); err != nil {
		t.Fatal(err)
	}
	slices.Sort(fired)
	if !slices.Equal(fired, []int{0, 1}) {
		t.Fatalf("fired %v, want [0 1]", fired)
	}
}

func TestTwoSetsDoNotShareNodes(t *testing.T) {
	g := G.NewGraph()
	w := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 2), G.WithName("w"), G.WithValue(matrix[float64](2, 2, 1)))
	nop := func(int, G.Value) error { return nil }
	s1, err1 := New(G.Nodes{w}, nop)
	s2, err2 := New(G.Nodes{w}, nop)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if s1.Node(0) == s2.Node(0) {
		t.Fatal("two Sets over one parameter share a wrapper, and so a callback")
	}
	if first := s1.Node(0); s1.Node(0) != first {
		t.Fatal("Node(0) created a second wrapper")
	}
}

func TestNewRejectsBadParams(t *testing.T) {
	g, other := G.NewGraph(), G.NewGraph()
	w := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 2), G.WithName("w"))
	v := G.NewMatrix(g, tensor.Float64, G.WithShape(2, 2), G.WithName("v"))
	elsewhere := G.NewMatrix(other, tensor.Float64, G.WithShape(2, 2), G.WithName("e"))
	computed := must(t)(G.Add(w, v))
	nop := func(int, G.Value) error { return nil }
	cases := []struct {
		name   string
		params G.Nodes
		fn     Func
	}{
		{"nil func", G.Nodes{w}, nil},
		{"no params", nil, nop},
		{"nil param", G.Nodes{w, nil}, nop},
		{"duplicate", G.Nodes{w, v, w}, nop},
		{"two graphs", G.Nodes{w, elsewhere}, nop},
		{"not a variable", G.Nodes{w, computed}, nop},
	}
	for _, c := range cases {
		if s, err := New(c.params, c.fn); err == nil {
			t.Errorf("%s: New = %v, want an error", c.name, s)
		}
	}
	s, err := New(G.Nodes{w, v}, nop)
	if err != nil {
		t.Fatal(err)
	}
	if s.Node(-1) != nil || s.Node(2) != nil {
		t.Error("Node out of range is not nil")
	}
	if s.Len() != 2 || !slices.Equal(s.Params(), G.Nodes{w, v}) {
		t.Errorf("Len %d, Params %v", s.Len(), s.Params())
	}
}

// TestOpsReturnErrorsNotPanics: Do runs on RunAll's goroutine, where a
// panic kills the process.
func TestOpsReturnErrorsNotPanics(t *testing.T) {
	nop := func(int, G.Value) (G.Value, error) { return nil, nil }
	for _, op := range []G.Op{&paramHook{fn: nop}, &gradHook{fn: nop}} {
		if _, err := op.Do(); err == nil {
			t.Errorf("%v.Do() with no input succeeded", op)
		}
		if _, err := op.Do(nil); err == nil {
			t.Errorf("%v.Do(nil) succeeded", op)
		}
		if _, err := op.InferShape(); err == nil {
			t.Errorf("%v.InferShape() with no input succeeded", op)
		}
		in := G.NewF64(1)
		if out, err := op.Do(in); err != nil || out != in {
			t.Errorf("%v.Do(x) = %v, %v; want x itself", op, out, err)
		}
	}
}

// TestScalarParameter: the identity ops must accept a scalar's empty shape.
func TestScalarParameter(t *testing.T) {
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 2), G.WithName("x"), G.WithValue(matrix[float32](2, 2, 1)))
	k := G.NewScalar(g, tensor.Float32, G.WithName("k"), G.WithValue(float32(3)))
	var got G.Value
	s, err := New(G.Nodes{k}, func(_ int, grad G.Value) error { got = grad; return nil })
	if err != nil {
		t.Fatal(err)
	}
	cost := must(t)(G.Sum(must(t)(G.Mul(x, s.Node(0)))))
	if _, _, err := s.Grad(cost); err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	if err := RunAll(vm); err != nil {
		t.Fatal(err)
	}
	var sum float64 // d sum(k·x)/dk = sum(x)
	for _, v := range floats(t, x.Value()) {
		sum += v
	}
	if got == nil || math.Abs(floats(t, got)[0]-sum) > 1e-5 {
		t.Fatalf("hook saw %v, want %v", got, sum)
	}
}
