package optim

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// torchOptimizer is one optimizer configuration, in Go and in torch's
// argument names for testdata/torch_optim.py.
type torchOptimizer struct {
	what  string
	name  string
	o     Options
	args  map[string]any
	sched *Recipe
}

// torchSchedule is a Recipe as testdata/torch_optim.py reads it.
func torchSchedule(r Recipe) map[string]any {
	f, g := 1.0/3, 0.1
	if r.WarmupStartFactor != nil {
		f = *r.WarmupStartFactor
	}
	if r.Gamma != nil {
		g = *r.Gamma
	}
	return map[string]any{"kind": r.Kind, "warmup": r.WarmupSteps, "start_factor": f, "min_lr": r.MinLR,
		"total": r.Steps, "step_size": r.StepSize, "gamma": g}
}

func torchOptimizers() []torchOptimizer {
	cosine := &Recipe{Kind: "cosine", LR: 0.05, Steps: 20, WarmupSteps: 4, MinLR: 1e-3}
	step := &Recipe{Kind: "step", LR: 0.1, WarmupSteps: 3, WarmupStartFactor: Set(0.25), StepSize: 5, Gamma: Set(0.5)}
	return []torchOptimizer{
		{"sgd wd", "sgd", Options{LR: Set(0.1), WeightDecay: Set(0.05)},
			map[string]any{"lr": 0.1, "weight_decay": 0.05}, nil},
		{"sgd momentum dampening", "sgd", Options{LR: Set(0.1), Momentum: Set(0.9), Dampening: Set(0.1)},
			map[string]any{"lr": 0.1, "momentum": 0.9, "dampening": 0.1}, nil},
		{"sgd momentum dampening wd", "momentum", Options{LR: Set(0.05), Dampening: Set(0.5), WeightDecay: Set(1e-3)},
			map[string]any{"lr": 0.05, "momentum": 0.9, "dampening": 0.5, "weight_decay": 1e-3}, nil},
		{"sgd nesterov wd", "sgd", Options{LR: Set(0.1), Momentum: Set(0.8), Nesterov: true, WeightDecay: Set(0.01)},
			map[string]any{"lr": 0.1, "momentum": 0.8, "nesterov": true, "weight_decay": 0.01}, nil},
		{"sgd nesterov wd, warmup+step", "sgd", Options{LR: Set(0.1), Momentum: Set(0.9), Nesterov: true,
			WeightDecay: Set(0.01)}, map[string]any{"lr": 0.1, "momentum": 0.9, "nesterov": true, "weight_decay": 0.01},
			step},
		{"adam", "adam", Options{LR: Set(0.01)}, map[string]any{"lr": 0.01}, nil},
		{"adam wd betas eps", "adam", Options{LR: Set(0.01), WeightDecay: Set(0.01), Betas: &[2]float64{0.8, 0.99},
			Eps: Set(1e-6)}, map[string]any{"lr": 0.01, "weight_decay": 0.01, "betas": []float64{0.8, 0.99}, "eps": 1e-6},
			nil},
		{"adamw defaults", "adamw", Options{}, map[string]any{"lr": 1e-3}, nil},
		{"adamw wd betas", "adamw", Options{LR: Set(0.02), WeightDecay: Set(0.1), Betas: &[2]float64{0.85, 0.995}},
			map[string]any{"lr": 0.02, "weight_decay": 0.1, "betas": []float64{0.85, 0.995}}, nil},
		{"adamw, warmup+cosine", "adamw", Options{LR: Set(0.05)}, map[string]any{"lr": 0.05}, cosine},
	}
}

func torchSchedules() []Recipe {
	return []Recipe{
		{Kind: "constant", LR: 0.1, WarmupSteps: 5},
		{Kind: "cosine", LR: 0.1, Steps: 50, WarmupSteps: 5, MinLR: 1e-4},
		{Kind: "cosine", LR: 0.1, Steps: 40, WarmupSteps: 7, WarmupStartFactor: Set(0.1)}, // 50 steps: past T_max
		{Kind: "cosine", LR: 3e-4, Steps: 50},
		{Kind: "linear", LR: 0.1, Steps: 50, WarmupSteps: 5, MinLR: 1e-3},
		{Kind: "linear", LR: 0.1, Steps: 30, MinLR: 0},
		{Kind: "step", LR: 0.1, WarmupSteps: 5, StepSize: 7, Gamma: Set(0.5)},
		{Kind: "step", LR: 1, StepSize: 10},
	}
}

// The fixed problem: three parameters and torchSteps steps of gradients.
const torchSteps = 20

func torchProblem() (params [][]float64, grads [][][]float64) {
	r := rand.New(rand.NewPCG(36, 1))
	normal := func(n int, scale float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = r.NormFloat64() * scale
		}
		return v
	}
	params = [][]float64{normal(5, 1), normal(3, 0.5), normal(1, 2)}
	for range torchSteps {
		grads = append(grads, [][]float64{normal(5, 0.3), normal(3, 1), normal(1, 0.01)})
	}
	return params, grads
}

// runGo steps c's optimizer (and schedule) over the problem in float64.
func runGo(t *testing.T, c torchOptimizer, params [][]float64, grads [][][]float64) [][]float64 {
	t.Helper()
	o, err := NewWith(c.name, c.o, len(params))
	if err != nil {
		t.Fatal(err)
	}
	var s *Schedule
	if c.sched != nil {
		if s, err = NewSchedule(*c.sched); err != nil {
			t.Fatal(err)
		}
	}
	ps := tensors(pg.Float64, params)
	for _, g := range grads {
		if s != nil {
			if err := o.SetLR(s.LR()); err != nil {
				t.Fatal(err)
			}
		}
		if err := o.Step(ps, tensors(pg.Float64, g)); err != nil {
			t.Fatal(err)
		}
		if s != nil {
			s.Step()
		}
	}
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = toFloat64s(p)
	}
	return out
}

// Every optimizer configuration and every schedule against torch 1.13,
// float64: each final parameter within 1e-9 (relative to max(1, |p|)),
// each rate within 1e-12. -v prints the largest differences.
func TestAgainstTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skip("/usr/bin/python3 has no torch (apt-get install python3-torch; scripts/test.sh does)")
	}
	params, grads := torchProblem()
	opts, scheds := torchOptimizers(), torchSchedules()
	spec := map[string]any{"params": params, "grads": grads}
	var optSpecs, ss []map[string]any
	for _, c := range opts {
		o := map[string]any{"name": c.name, "args": c.args}
		if c.sched != nil {
			o["schedule"] = torchSchedule(*c.sched)
		}
		optSpecs = append(optSpecs, o)
	}
	for _, r := range scheds {
		ss = append(ss, map[string]any{"lr": r.LR, "steps": 50, "schedule": torchSchedule(r)})
	}
	spec["optimizers"], spec["schedules"] = optSpecs, ss
	in, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "testdata/torch_optim.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("testdata/torch_optim.py: %v\n%s", err, stderr.String())
	}
	var got struct {
		Version    string
		Optimizers [][][]float64
		Schedules  [][]float64
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("torch %s, %d steps", got.Version, torchSteps)
	for k, c := range opts {
		mine, worst := runGo(t, c, params, grads), 0.0
		for i := range mine {
			for j := range mine[i] {
				d := math.Abs(mine[i][j]-got.Optimizers[k][i][j]) / math.Max(1, math.Abs(got.Optimizers[k][i][j]))
				worst = math.Max(worst, d)
			}
		}
		t.Logf("%-32s max param diff %.3g", c.what, worst)
		if worst > 1e-9 {
			t.Errorf("%s: parameters differ from torch's by %.3g; want <= 1e-9\ngo    %v\ntorch %v", c.what, worst, mine,
				got.Optimizers[k])
		}
	}
	for k, r := range scheds {
		s, err := NewSchedule(r)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for step, want := range got.Schedules[k] {
			d := math.Abs(s.LR() - want)
			worst = math.Max(worst, d)
			if d > 1e-12 {
				t.Errorf("%s: the rate at step %d is %.17g, torch's %.17g", s.Name(), step, s.LR(), want)
			}
			s.Step()
		}
		t.Logf("%-28s S=%d W=%d: max rate diff %.3g", s.Name(), r.Steps, r.WarmupSteps, worst)
	}
}
