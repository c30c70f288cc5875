package autogradhooks

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// unusedGraph is a small model with a used weight W (params[0]) and a
// second parameter P (params[1]) whose role varies by case.
type unusedGraph struct {
	g      *G.ExprGraph
	cost   *G.Node
	params G.Nodes
	set    *Set // non-nil when the parameters are wrapped
}

type unusedCase struct {
	name string
	// useP adds P to the model given x (2×3), W's output xw (2×2) and the
	// cost so far; it returns the new cost.
	useP       func(t testing.TB, x, xw, p, cost *G.Node) *G.Node
	wantUnused []int
}

func unusedCases() []unusedCase {
	return []unusedCase{
		{"disconnected", func(_ testing.TB, _, _, _, cost *G.Node) *G.Node { return cost }, []int{1}},
		{"side branch", func(t testing.TB, x, _, p, cost *G.Node) *G.Node {
			must(t)(G.Mul(x, p)) // computed, but feeds nothing
			return cost
		}, []int{1}},
		{"non-differentiable", func(t testing.TB, x, xw, p, cost *G.Node) *G.Node {
			mask := must(t)(G.Gt(must(t)(G.Mul(x, p)), xw, true)) // 0/1, no gradient
			return must(t)(G.Add(cost, must(t)(G.Sum(must(t)(G.HadamardProd(xw, mask))))))
		}, []int{1}},
		{"times zero", func(t testing.TB, x, _, p, cost *G.Node) *G.Node {
			zero := G.NewConstant(0.0, G.WithName("zero"))
			return must(t)(G.Add(cost, must(t)(G.Sum(must(t)(G.Mul(must(t)(G.Mul(x, p)), zero))))))
		}, nil},
		{"used", func(t testing.TB, x, _, p, cost *G.Node) *G.Node {
			return must(t)(G.Add(cost, must(t)(G.Sum(must(t)(G.Square(must(t)(G.Mul(x, p))))))))
		}, nil},
	}
}

func buildUnused(t testing.TB, c unusedCase, wrap bool, fn Func) *unusedGraph {
	t.Helper()
	u := &unusedGraph{g: G.NewGraph()}
	x := G.NewMatrix(u.g, tensor.Float64, G.WithShape(2, 3), G.WithName("x"), G.WithValue(matrix[float64](2, 3, 1)))
	w := G.NewMatrix(u.g, tensor.Float64, G.WithShape(3, 2), G.WithName("W"), G.WithValue(matrix[float64](3, 2, 2)))
	p := G.NewMatrix(u.g, tensor.Float64, G.WithShape(3, 2), G.WithName("P"), G.WithValue(matrix[float64](3, 2, 3)))
	u.params = G.Nodes{w, p}
	if wrap {
		s, err := New(u.params, fn)
		if err != nil {
			t.Fatal(err)
		}
		u.set, w, p = s, s.Node(0), s.Node(1)
	}
	xw := must(t)(G.Mul(x, w))
	u.cost = c.useP(t, x, xw, p, must(t)(G.Sum(xw)))
	return u
}

// TestUnused checks Unused on each case, raw and wrapped, and checks it
// against gorgonia.Grad: Grad must reject exactly the parameters Unused
// names.
func TestUnused(t *testing.T) {
	for _, c := range unusedCases() {
		for _, wrap := range []bool{false, true} {
			name := c.name
			if wrap {
				name += "/wrapped"
			}
			t.Run(name, func(t *testing.T) {
				u := buildUnused(t, c, wrap, func(int, G.Value) error { return nil })
				if got := Unused(u.cost, u.params); !slices.Equal(got, c.wantUnused) {
					t.Fatalf("Unused = %v, want %v", got, c.wantUnused)
				}
				_, err := G.Grad(u.cost, u.params...)
				var sde G.SymDiffError
				switch {
				case len(c.wantUnused) == 0 && err != nil:
					t.Fatalf("gorgonia.Grad = %v, want success", err)
				case len(c.wantUnused) > 0 && !errors.As(err, &sde):
					t.Fatalf("gorgonia.Grad = %v, want a SymDiffError", err)
				case len(c.wantUnused) > 0 && !sameNodes(sde.Nodes(), pick(u.params, c.wantUnused)):
					t.Fatalf("gorgonia.Grad rejects %v, Unused says %v", sde.Nodes(), pick(u.params, c.wantUnused))
				}
			})
		}
	}
}

// TestGradSkipsUnused runs each wrapped case through Set.Grad and a
// machine: unused parameters get no gradient node and no hook call, used
// ones fire once, and a parameter multiplied by zero gets a zero gradient.
func TestGradSkipsUnused(t *testing.T) {
	for _, c := range unusedCases() {
		t.Run(c.name, func(t *testing.T) {
			var fired []int
			u := buildUnused(t, c, true, func(i int, _ G.Value) error {
				fired = append(fired, i)
				return nil
			})
			grads, unused, err := u.set.Grad(u.cost)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(unused, c.wantUnused) {
				t.Fatalf("unused = %v, want %v", unused, c.wantUnused)
			}
			for i, g := range grads {
				if (g == nil) != slices.Contains(unused, i) {
					t.Fatalf("grads[%d] = %v with unused %v", i, g, unused)
				}
			}
			vm := G.NewTapeMachine(u.g)
			defer vm.Close()
			if err := RunAll(vm); err != nil {
				t.Fatal(err)
			}
			slices.Sort(fired)
			if want := complement(len(u.params), unused); !slices.Equal(fired, want) {
				t.Fatalf("hooks fired for %v, want exactly the used parameters %v", fired, want)
			}
			if c.name == "times zero" {
				for _, v := range floats(t, grads[1].Value()) {
					if v != 0 {
						t.Fatalf("gradient of P×0 = %v, want zeros", grads[1].Value())
					}
				}
			}
		})
	}
}

func TestUnusedEdgeCases(t *testing.T) {
	u := buildUnused(t, unusedCases()[4], false, nil)
	if got := Unused(nil, u.params); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("Unused(nil cost) = %v, want every parameter", got)
	}
	if got := Unused(u.cost, G.Nodes{nil, u.params[0]}); !slices.Equal(got, []int{0}) {
		t.Errorf("Unused with a nil parameter = %v, want [0]", got)
	}
	other := buildUnused(t, unusedCases()[4], false, nil)
	if got := Unused(u.cost, other.params); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("Unused with another graph's parameters = %v, want every parameter", got)
	}
	grads, unused, err := Grad(u.cost, G.Nodes{other.params[0]})
	if err != nil || len(grads) != 1 || grads[0] != nil || !slices.Equal(unused, []int{0}) {
		t.Errorf("Grad with no used parameter = %v, %v, %v; want [nil], [0], nil", grads, unused, err)
	}
	if _, _, err := Grad(nil, u.params); err == nil {
		t.Error("Grad(nil cost) succeeded")
	}
}

// TestGradRejectsBypassedHooks: a hook that sees only part of its
// parameter's gradient, or none of it, would break the reducer.
func TestGradRejectsBypassedHooks(t *testing.T) {
	// build adds sum(P) to the "used" model's cost, through the raw P, the
	// wrapped P, or both.
	build := func(raw, wrapped bool) (*Set, *G.Node) {
		u := buildUnused(t, unusedCases()[4], false, nil)
		s, err := New(u.params, func(int, G.Value) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		cost := u.cost
		if raw {
			cost = must(t)(G.Add(cost, must(t)(G.Sum(u.params[1]))))
		}
		if wrapped {
			cost = must(t)(G.Add(cost, must(t)(G.Sum(s.Node(1)))))
		}
		return s, cost
	}

	bypass := func(err error, partly bool) bool { // the first bypassed parameter: P when partly, else W
		var b *BypassError
		i := map[bool]int{true: 1, false: 0}[partly]
		return errors.As(err, &b) && b.Index == i && b.Partly == partly &&
			strings.Contains(err.Error(), fmt.Sprintf("Set.Node(%d)", i))
	}
	s, cost := build(true, true)
	if _, _, err := Grad(cost, s.Params()); !bypass(err, true) {
		t.Errorf("Grad of a parameter used both directly and through its hook: %v, want a *BypassError{Index: 1, Partly: "+
			"true}", err)
	}

	s, cost = build(true, false)
	if _, _, err := s.Grad(cost); !bypass(err, false) {
		t.Errorf("Set.Grad of a parameter whose hook is never reached: %v, want a *BypassError{Index: 0}", err)
	}
	if _, _, err := Grad(cost, s.Params()); err != nil {
		t.Errorf("Grad knows no Set, and nothing is wrapped, so it should succeed: %v", err)
	}

	s, cost = build(false, true)
	if _, _, err := s.Grad(cost); err == nil {
		t.Error("Set.Grad accepted W, which the model uses unwrapped")
	}
}

func pick(ns G.Nodes, idx []int) G.Nodes {
	var out G.Nodes
	for _, i := range idx {
		out = append(out, ns[i])
	}
	return out
}

func sameNodes(a, b G.Nodes) bool {
	if len(a) != len(b) {
		return false
	}
	for _, n := range a {
		if !slices.Contains(b, n) {
			return false
		}
	}
	return true
}
