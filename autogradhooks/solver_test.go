package autogradhooks

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
)

// The DDP recipe: after RunAll, write the averaged gradient into
// params[i].Grad() in place, then let the solver step. These tests check
// that the solver applies the written gradient, not the computed one, by
// replaying the update by hand.

// rule is one solver and the same update written out by hand.
type rule struct {
	name   string
	solver func() G.Solver
	// update applies one step to w for parameter p, given gradient g, at
	// step t (from 1); state is per-parameter scratch the rule may keep.
	update func(w, g []float64, t int, state *[2][]float64)
}

const (
	lr    = 0.05
	beta1 = 0.9
	beta2 = 0.999
	eps   = 1e-8
)

func solverRules() []rule {
	return []rule{
		{
			name:   "vanilla",
			solver: func() G.Solver { return G.NewVanillaSolver(G.WithLearnRate(lr)) },
			update: func(w, g []float64, _ int, _ *[2][]float64) {
				for k := range w {
					w[k] += g[k] * -lr
				}
			},
		},
		{
			name: "adam",
			solver: func() G.Solver {
				return G.NewAdamSolver(G.WithLearnRate(lr), G.WithBeta1(beta1), G.WithBeta2(beta2), G.WithEps(eps))
			},
			update: func(w, g []float64, t int, state *[2][]float64) {
				if state[0] == nil {
					state[0], state[1] = make([]float64, len(w)), make([]float64, len(w))
				}
				m, v := state[0], state[1]
				c1, c2 := 1-math.Pow(beta1, float64(t)), 1-math.Pow(beta2, float64(t))
				for k := range w {
					m[k] = beta1*m[k] + (1-beta1)*g[k]
					v[k] = beta2*v[k] + (1-beta2)*g[k]*g[k]
					w[k] += -lr * (m[k] / c1) / (math.Sqrt(v[k]/c2) + eps)
				}
			},
		},
	}
}

func TestOverwrittenGradientReachesSolver(t *testing.T) {
	for _, r := range solverRules() {
		t.Run(r.name+"/float32", func(t *testing.T) { testOverwrite[float32](t, r, 1e-5) })
		t.Run(r.name+"/float64", func(t *testing.T) { testOverwrite[float64](t, r, 1e-12) })
	}
}

// replacement is the gradient written over parameter i's at step t: it has
// nothing to do with the computed one and changes sign along the tensor.
func replacement(t, i, n int) []float64 {
	out := make([]float64, n)
	for k := range out {
		out[k] = 0.3 * math.Cos(float64(t)*2.1+float64(i)*0.7+float64(k)*0.45)
	}
	return out
}

func testOverwrite[T float](t *testing.T, r rule, tol float64) {
	const steps = 3
	m := buildMLP[T](t, atUse, func(int, G.Value) error { return nil })
	vm := G.NewTapeMachine(m.g)
	defer vm.Close()
	solver := r.solver()

	n := len(m.params)
	// By hand: want applies the written gradients; unchanged applies the
	// computed ones, which is where a solver that ignored the writes would
	// roughly be.
	want, unchanged := make([][]float64, n), make([][]float64, n)
	state, stateUnchanged := make([][2][]float64, n), make([][2][]float64, n)
	for i, p := range m.params {
		want[i], unchanged[i] = floats(t, p.Value()), floats(t, p.Value())
	}

	for step := 1; step <= steps; step++ {
		m.setInput(t, step)
		if err := RunAll(vm); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for i, p := range m.params {
			g, err := p.Grad()
			if err != nil {
				t.Fatalf("step %d: %s.Grad(): %v", step, p.Name(), err)
			}
			computed := floats(t, g)
			written := replacement(step, i, len(computed))
			setFloats(t, g, written)
			r.update(want[i], written, step, &state[i])
			r.update(unchanged[i], computed, step, &stateUnchanged[i])
		}
		if err := solver.Step(G.NodesToValueGrads(m.params)); err != nil {
			t.Fatalf("step %d: solver: %v", step, err)
		}
		vm.Reset()
	}

	for i, p := range m.params {
		got := floats(t, p.Value())
		if d := maxRelDiff(got, want[i]); d > tol {
			t.Errorf("%s after %d steps is %.3g away from the update with the written gradient", p.Name(), steps, d)
		}
		if d := maxRelDiff(got, unchanged[i]); d < 100*tol {
			t.Errorf("%s is only %.3g away from the update with the computed gradient: the test cannot tell them apart",
				p.Name(), d)
		}
	}
}

func maxRelDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var worst float64
	for k := range a {
		worst = math.Max(worst, math.Abs(a[k]-b[k])/math.Max(1, math.Abs(b[k])))
	}
	return worst
}
