package optim

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// Stepping twice, saving the state into a fresh optimizer and stepping
// both on gives the same parameters, bitwise, as never stopping.
func TestStateLoadContinuesExactly(t *testing.T) {
	more := [][][]float64{{{0.3, -0.7}, {1.1}}, {{-0.01, 2.5}, {-0.3}}}
	for _, name := range Names() {
		for _, d := range []pg.Dtype{pg.Float32, pg.Float64} {
			t.Run(name+"/"+d.String(), func(t *testing.T) {
				a, _ := New(name, 0.05, 2)
				pa := tensors(d, start)
				for _, g := range steps[:2] {
					if err := a.Step(pa, tensors(d, g)); err != nil {
						t.Fatal(err)
					}
				}
				st := a.State()
				b, _ := New(name, 0.05, 2)
				if err := b.Load(st); err != nil {
					t.Fatal(err)
				}
				for _, v := range st.Buffers { // Load must have copied them
					v[0] = math.NaN()
				}
				pb := tensors(d, [][]float64{toFloat64s(pa[0]), toFloat64s(pa[1])})
				for s, g := range append(slices.Clone(steps[2:]), more...) {
					if err := a.Step(pa, tensors(d, g)); err != nil {
						t.Fatal(err)
					}
					if err := b.Step(pb, tensors(d, g)); err != nil {
						t.Fatal(err)
					}
					for i := range pa {
						if !slices.Equal(pa[i].Data, pb[i].Data) {
							t.Fatalf("step %d after resuming: param %d is %v, uninterrupted %v", s+3, i, toFloat64s(pb[i]),
								toFloat64s(pa[i]))
						}
					}
				}
				if sa, sb := a.State(), b.State(); sa.Step != 5 || sb.Step != 5 || len(sa.Buffers) != len(sb.Buffers) {
					t.Errorf("states after 5 steps: %+v and %+v", sa, sb)
				}
			})
		}
	}
}

func TestStateKeys(t *testing.T) {
	want := map[string][]string{
		"sgd":      nil,
		"momentum": {"momentum/0", "momentum/1"},
		"adam":     {"exp_avg/0", "exp_avg/1", "exp_avg_sq/0", "exp_avg_sq/1"},
	}
	for name, keys := range want {
		o, _ := New(name, 0.1, 2)
		if n := len(o.State().Buffers); n != 0 {
			t.Errorf("%s: %d buffers before any step", name, n)
		}
		if err := o.Step(tensors(pg.Float32, start), tensors(pg.Float32, steps[0])); err != nil {
			t.Fatal(err)
		}
		st := o.State()
		var got []string
		for k := range st.Buffers {
			got = append(got, k)
		}
		slices.Sort(got)
		if st.Name != name || st.Step != 1 || !slices.Equal(got, keys) {
			t.Errorf("%s: state %q step %d keys %v; want %q 1 %v", name, st.Name, st.Step, got, name, keys)
		}
	}
}

func TestLoadRejectsForeignState(t *testing.T) {
	full := func() State {
		return State{Name: "adam", Step: 1, Buffers: map[string][]float64{
			"exp_avg/0": {0, 0}, "exp_avg/1": {0}, "exp_avg_sq/0": {0, 0}, "exp_avg_sq/1": {0},
		}}
	}
	for _, c := range []struct {
		name string
		edit func(*State)
		want string
	}{
		{"another optimizer", func(s *State) { s.Name = "momentum" }, "momentum"},
		{"negative step", func(s *State) { s.Step = -1 }, "step -1"},
		{"unknown kind", func(s *State) { s.Buffers["momentum/0"] = []float64{0, 0} }, "momentum/0"},
		{"index out of range", func(s *State) { s.Buffers["exp_avg/2"] = []float64{0} }, "exp_avg/2"},
		{"index not canonical", func(s *State) { s.Buffers["exp_avg/01"] = []float64{0} }, "exp_avg/01"},
		{"missing buffer", func(s *State) { delete(s.Buffers, "exp_avg_sq/1") }, "exp_avg_sq/1"},
	} {
		o, _ := New("adam", 0.1, 2)
		s := full()
		c.edit(&s)
		if err := o.Load(s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Load gave %v; want an error naming %q", c.name, err, c.want)
		}
	}
	o, _ := New("adam", 0.1, 2)
	if err := o.Load(full()); err != nil {
		t.Fatalf("a complete state: %v", err)
	}
	// Buffer lengths are checked against the parameters at the next Step.
	wrong := full()
	wrong.Buffers["exp_avg/0"] = []float64{0, 0, 0}
	if err := o.Load(wrong); err != nil {
		t.Fatal(err)
	}
	if err := o.Step(tensors(pg.Float64, start), tensors(pg.Float64, steps[0])); err == nil ||
		!strings.Contains(err.Error(), "exp_avg/0") {
		t.Errorf("Step with a 3-value buffer for a 2-value parameter: %v", err)
	}
}
