package optim

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// A parameter without a gradient (nil Data, torch's None) is skipped as
// torch skips it: it and its state stay, and its own step count does not
// advance, so when it first gets a gradient at the optimizer's third step
// it is updated exactly as a fresh optimizer's first step would update it.
// The other parameter steps as if the skipped one were not there. The
// state, saved and loaded midway, carries the per-parameter count.
func TestSkippedParameterStepsFromItsOwnCount(t *testing.T) {
	gs := [][]float64{{0.3, -0.7}, {-0.01, 2.5}, {1.2, 0.4}, {-0.6, 0.05}}
	for _, name := range Names() {
		for _, d := range []pg.Dtype{pg.Float32, pg.Float64} {
			t.Run(name+"/"+d.String(), func(t *testing.T) {
				both, _ := New(name, 0.05, 2)
				p := tensors(d, [][]float64{{1, -2}, {0.5, 0.25}})
				for s, g := range gs {
					grads := tensors(d, [][]float64{g, {g[1], g[0]}})
					if s < 2 {
						grads[1] = pg.Tensor{Dtype: d} // no gradient yet
					}
					if s == 2 { // checkpoint and resume midway
						st := both.State()
						if got := st.Buffers["step/1"]; !slices.Equal(got, []float64{0}) {
							t.Fatalf("State()[step/1] = %v, want [0]", got)
						}
						if name != "sgd" {
							for k := range st.Buffers {
								if strings.HasSuffix(k, "/1") && !strings.HasPrefix(k, "step/") {
									t.Fatalf("the skipped parameter has state %s", k)
								}
							}
						}
						both, _ = New(name, 0.05, 2)
						if err := both.Load(st); err != nil {
							t.Fatal(err)
						}
					}
					if err := both.Step(p, grads); err != nil {
						t.Fatal(err)
					}
					if s < 2 && !slices.Equal(toFloat64s(p[1]), []float64{0.5, 0.25}) {
						t.Fatalf("step %d: the parameter without a gradient moved to %v", s, toFloat64s(p[1]))
					}
				}
				// The reference: each parameter alone, from its first gradient.
				alone0, _ := New(name, 0.05, 1)
				q0 := tensors(d, [][]float64{{1, -2}})
				for _, g := range gs {
					if err := alone0.Step(q0, tensors(d, [][]float64{g})); err != nil {
						t.Fatal(err)
					}
				}
				alone1, _ := New(name, 0.05, 1)
				q1 := tensors(d, [][]float64{{0.5, 0.25}})
				for _, g := range gs[2:] {
					if err := alone1.Step(q1, tensors(d, [][]float64{{g[1], g[0]}})); err != nil {
						t.Fatal(err)
					}
				}
				for i, want := range [][]float64{toFloat64s(q0[0]), toFloat64s(q1[0])} {
					if got := toFloat64s(p[i]); !slices.Equal(got, want) {
						t.Errorf("parameter %d = %v; stepped alone from its first gradient: %v", i, got, want)
					}
				}
				if st := both.State(); st.Step != 4 || !slices.Equal(st.Buffers["step/1"], []float64{2}) {
					t.Errorf("State: Step %d, step/1 %v; want 4 and [2]", st.Step, st.Buffers["step/1"])
				}
			})
		}
	}
}

func TestLoadRejectsBadStepCounts(t *testing.T) {
	for _, bad := range [][]float64{{-1}, {1.5}, {5}, {math.NaN()}, {1, 1}} {
		o, _ := New("adam", 0.1, 2)
		err := o.Load(State{Name: "adam", Step: 3, Buffers: map[string][]float64{"step/1": bad}})
		if err == nil || !strings.Contains(err.Error(), "step/1") {
			t.Errorf("Load(step/1 = %v) = %v; want an error naming step/1", bad, err)
		}
	}
	o, _ := New("adam", 0.1, 2) // a parameter never stepped needs no buffers
	if err := o.Load(State{Name: "adam", Step: 3, Buffers: map[string][]float64{
		"step/1": {0}, "exp_avg/0": {0}, "exp_avg_sq/0": {0},
	}}); err != nil {
		t.Errorf("Load of a state whose parameter 1 was never stepped: %v", err)
	}
}
