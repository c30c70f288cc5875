package optim

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// A run of 50 steps under warmup and cosine (and under warmup and step
// decay) stopped at step 3 (in the warmup) or 30 (in the main schedule),
// its optimizer's and schedule's states loaded into fresh ones, continues
// bit for bit as the uninterrupted run: every rate and every parameter.
func TestScheduleResumeIsExact(t *testing.T) {
	recipes := []Recipe{
		{Kind: "cosine", LR: 0.05, Steps: 50, WarmupSteps: 5, MinLR: 1e-3},
		{Kind: "step", LR: 0.05, WarmupSteps: 5, StepSize: 4, Gamma: Set(0.7)},
		{Kind: "linear", LR: 0.05, Steps: 50, WarmupSteps: 5},
	}
	configs := map[string]Options{
		"adamw":    {LR: Set(0.05)},
		"sgd":      {LR: Set(0.05), Momentum: Set(0.9), Nesterov: true, WeightDecay: Set(1e-2)},
		"momentum": {LR: Set(0.05), Dampening: Set(0.2)},
		"adam":     {LR: Set(0.05), WeightDecay: Set(1e-2)},
	}
	params, grads := torchProblem()
	for name, o := range configs {
		for _, r := range recipes {
			for _, stop := range []int{3, 30} {
				for _, d := range []pg.Dtype{pg.Float32, pg.Float64} {
					ref, refRates := runResumed(t, name, o, r, d, params, grads, -1)
					got, gotRates := runResumed(t, name, o, r, d, params, grads, stop)
					if !slices.Equal(refRates, gotRates) {
						t.Errorf("%s %s stopped at %d, %v: rates %v; uninterrupted %v", name, r.Kind, stop, d, gotRates,
							refRates)
					}
					for i := range ref {
						if !slices.Equal(ref[i].Data, got[i].Data) {
							t.Errorf("%s %s stopped at %d, %v: param %d is %v; uninterrupted %v", name, r.Kind, stop, d, i,
								toFloat64s(got[i]), toFloat64s(ref[i]))
						}
					}
				}
			}
		}
	}
}

// runResumed runs 50 steps (cycling through grads); at step stop (if >= 0)
// it replaces the optimizer and schedule by fresh ones loaded from their
// states.
func runResumed(t *testing.T, name string, o Options, r Recipe, d pg.Dtype, params [][]float64,
	grads [][][]float64, stop int) ([]pg.Tensor, []float64) {
	t.Helper()
	fresh := func() (Optimizer, *Schedule) {
		opt, err := NewWith(name, o, len(params))
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSchedule(r)
		if err != nil {
			t.Fatal(err)
		}
		return opt, s
	}
	opt, s := fresh()
	ps := tensors(d, params)
	var rates []float64
	for step := range 50 {
		if step == stop {
			optState, schedState := opt.State(), s.State()
			opt, s = fresh()
			if err := opt.Load(optState); err != nil {
				t.Fatal(err)
			}
			if err := s.Load(schedState); err != nil {
				t.Fatal(err)
			}
		}
		rates = append(rates, s.LR())
		if err := opt.SetLR(s.LR()); err != nil {
			t.Fatal(err)
		}
		if err := opt.Step(ps, tensors(d, grads[step%len(grads)])); err != nil {
			t.Fatal(err)
		}
		s.Step()
	}
	return ps, rates
}

// The rate set with SetLR is in State only when it differs from the one
// the optimizer was made with, and Load restores it (or the made one).
func TestSetLRIsInState(t *testing.T) {
	o, _ := New("sgd", 0.1, 1)
	if _, ok := o.State().Buffers["lr"]; ok || o.LR() != 0.1 {
		t.Fatalf("a fresh optimizer: LR %v, state %v", o.LR(), o.State())
	}
	if err := o.SetLR(math.NaN()); err == nil || o.LR() != 0.1 {
		t.Errorf("SetLR(NaN) = %v, LR now %v", err, o.LR())
	}
	if err := o.SetLR(0.025); err != nil {
		t.Fatal(err)
	}
	st := o.State()
	if !slices.Equal(st.Buffers["lr"], []float64{0.025}) {
		t.Errorf("State after SetLR(0.025): %v", st.Buffers)
	}
	b, _ := New("sgd", 0.1, 1)
	if err := b.Load(st); err != nil || b.LR() != 0.025 {
		t.Errorf("Load: %v, LR %v; want 0.025", err, b.LR())
	}
	if err := b.Load(State{Name: "sgd"}); err != nil || b.LR() != 0.1 {
		t.Errorf("Load of a state without lr: %v, LR %v; want the made rate 0.1", err, b.LR())
	}
	for _, bad := range [][]float64{{-1}, {math.Inf(1)}, {0.1, 0.2}} {
		if err := b.Load(State{Name: "sgd", Buffers: map[string][]float64{"lr": bad}}); err == nil {
			t.Errorf("Load(lr = %v) accepted", bad)
		}
	}
}

func TestNewWithChecksAsTorch(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"sgd", Options{}, "learning rate"},
		{"sgd", Options{LR: Set(0.1), Nesterov: true}, "Nesterov"},
		{"momentum", Options{LR: Set(0.1), Nesterov: true, Dampening: Set(0.1)}, "dampening 0"},
		{"sgd", Options{LR: Set(0.1), Momentum: Set(-0.1)}, "momentum"},
		{"sgd", Options{LR: Set(0.1), WeightDecay: Set(-1)}, "weight decay"},
		{"sgd", Options{LR: Set(0.1), Betas: &[2]float64{0.9, 0.99}}, "Betas"},
		{"sgd", Options{LR: Set(0.1), Eps: Set(1e-8)}, "Eps"},
		{"adam", Options{Momentum: Set(0.9)}, "Momentum"},
		{"adamw", Options{Nesterov: true}, "Nesterov"},
		{"adam", Options{Betas: &[2]float64{0.9, 1}}, "betas[1]"},
		{"adamw", Options{Betas: &[2]float64{-0.1, 0.9}}, "betas[0]"},
		{"adam", Options{Eps: Set(math.NaN())}, "eps"},
		{"adam", Options{LR: Set(math.Inf(1))}, "learning rate"},
		{"rmsprop", Options{}, "adamw"},
	} {
		if _, err := NewWith(c.name, c.o, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewWith(%s, %+v) = %v; want an error naming %q", c.name, c.o, err, c.want)
		}
	}
	o, err := NewWith("adamw", Options{}, 1) // torch's defaults
	if a, ok := o.(*adam); err != nil || !ok || a.lr != 1e-3 || a.weightDecay != 1e-2 || !a.decoupled || a.beta1 != 0.9 ||
		a.beta2 != 0.999 || a.eps != 1e-8 {
		t.Errorf("NewWith(adamw, {}) = %+v, %v", o, err)
	}
	if o, _ := NewWith("adamw", Options{WeightDecay: Set(0)}, 1); o.(*adam).weightDecay != 0 {
		t.Error("WeightDecay: Set(0) did not turn AdamW's decay off")
	}
	if o, _ := NewWith("momentum", Options{LR: Set(0.1), Momentum: Set(0)}, 1); len(o.(*sgd).kinds) != 0 {
		t.Error("momentum with Momentum: Set(0) keeps a momentum buffer")
	}
}

// New and NewWith with only the rate give the same optimizer, bit for bit.
func TestNewIsNewWithLR(t *testing.T) {
	params, grads := torchProblem()
	for _, name := range Names() {
		a, _ := New(name, 0.01, len(params))
		b, _ := NewWith(name, Options{LR: Set(0.01)}, len(params))
		pa, pb := tensors(pg.Float32, params), tensors(pg.Float32, params)
		for _, g := range grads {
			if a.Step(pa, tensors(pg.Float32, g)) != nil || b.Step(pb, tensors(pg.Float32, g)) != nil {
				t.Fatal("Step failed")
			}
		}
		for i := range pa {
			if !slices.Equal(pa[i].Data, pb[i].Data) {
				t.Errorf("%s: New and NewWith differ at param %d", name, i)
			}
		}
	}
}

// float32 runs of the torch configurations stay close to the float64 runs.
func TestTorchConfigsInFloat32(t *testing.T) {
	params, grads := torchProblem()
	for _, c := range torchOptimizers() {
		want := runGo(t, c, params, grads)
		o, err := NewWith(c.name, c.o, len(params))
		if err != nil {
			t.Fatal(err)
		}
		ps := tensors(pg.Float32, params)
		var s *Schedule
		if c.sched != nil {
			s, _ = NewSchedule(*c.sched)
		}
		for _, g := range grads {
			if s != nil {
				_ = o.SetLR(s.LR())
			}
			if err := o.Step(ps, tensors(pg.Float32, g)); err != nil {
				t.Fatal(err)
			}
			if s != nil {
				s.Step()
			}
		}
		for i, p := range ps {
			for j, v := range toFloat64s(p) {
				if d := math.Abs(v - want[i][j]); d > 1e-5*math.Max(1, math.Abs(want[i][j])) {
					t.Errorf("%s float32: param %d[%d] = %v, float64 %v", c.what, i, j, v, want[i][j])
				}
			}
		}
	}
}

func TestScheduleChecks(t *testing.T) {
	for _, c := range []struct {
		r    Recipe
		want string
	}{
		{Recipe{Kind: "cosine", LR: 0.1, Steps: 5, WarmupSteps: 5}, "more steps"},
		{Recipe{Kind: "linear", LR: 0.1, Steps: 10, MinLR: 0.2}, "min rate"},
		{Recipe{Kind: "step", LR: 0.1}, "step_size"},
		{Recipe{Kind: "step", LR: 0.1, StepSize: 2, Gamma: Set(math.NaN())}, "gamma"},
		{Recipe{Kind: "constant", LR: 0.1, WarmupSteps: 2, WarmupStartFactor: Set(0)}, "warmup"},
		{Recipe{Kind: "constant", LR: 0.1, WarmupSteps: -1}, "warmup"},
		{Recipe{Kind: "constant", LR: -1}, "learning rate"},
		{Recipe{Kind: "onecycle", LR: 0.1}, "onecycle"},
	} {
		if _, err := NewSchedule(c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewSchedule(%+v) = %v; want an error naming %q", c.r, err, c.want)
		}
	}
	a, _ := Constant(0.1)
	b, _ := Constant(0.2)
	if _, err := SequentialLR([]*Schedule{a, b}, []int{3}); err == nil {
		t.Error("SequentialLR of schedules with different base rates accepted")
	}
	if _, err := SequentialLR([]*Schedule{a, a}, []int{0}); err == nil {
		t.Error("SequentialLR with milestone 0 accepted")
	}
	s, _ := NewSchedule(Recipe{Kind: "cosine", LR: 0.1, Steps: 10, WarmupSteps: 2})
	if err := s.Load(a.State()); err == nil || !strings.Contains(err.Error(), "constant") {
		t.Errorf("Load of a constant schedule's state into %s: %v", s.Name(), err)
	}
	if err := s.Load(ScheduleState{Step: -1, LR: 0.1}); err == nil {
		t.Error("Load of step -1 accepted")
	}
}
