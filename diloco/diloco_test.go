package diloco_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/averaging"
	"github.com/goddp/ddp/diloco"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sizes are the toy model's parameters.
var sizes = []int{5, 3, 4, 2}

// initial is the parameters every rank starts from.
func initial() [][]float64 {
	out := make([][]float64, len(sizes))
	for i, n := range sizes {
		for k := range n {
			out[i] = append(out[i], math.Sin(float64(3*i+k+1)))
		}
	}
	return out
}

// gradOf is rank r's gradient at inner step t: that of a quadratic whose
// minimum moves with the rank and the step, so the ranks drift apart.
func gradOf(r, t int, p [][]float64) [][]float64 {
	g := make([][]float64, len(p))
	for i := range p {
		for k, v := range p[i] {
			target := math.Cos(float64(r+1)*0.7+float64(t)*0.3+float64(i+k)) * 0.5
			g[i] = append(g[i], (v-target)*(1+0.1*float64(k)))
		}
	}
	return g
}

func tensors(v [][]float64) []pg.Tensor {
	out := make([]pg.Tensor, len(v))
	for i := range v {
		out[i] = pg.Float64s(v[i])
	}
	return out
}

func copyOf(v [][]float64) [][]float64 {
	out := make([][]float64, len(v))
	for i := range v {
		out[i] = append([]float64(nil), v[i]...)
	}
	return out
}

// run trains steps inner steps of the inner optimizer on every rank, with
// sync called after each one; it returns every rank's parameters (which
// differ after the inner steps since the last synchronisation).
func run(t *testing.T, ranks, steps int, inner string, sync func(ctx context.Context, g pg.ProcessGroup) (
	func(step int, params []pg.Tensor) error, func() error, error)) [][][]float64 {
	t.Helper()
	ctx := testworld.Ctx(t)
	gs := testworld.Local(t, ranks)
	out := make([][][]float64, ranks)
	testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
		p := initial()
		opt, err := optim.NewWith(inner, optim.Options{LR: optim.Set(0.05)}, len(sizes))
		if err != nil {
			return err
		}
		after, done, err := sync(ctx, g)
		if err != nil {
			return err
		}
		defer done()
		for step := range steps {
			if err := opt.Step(tensors(p), tensors(gradOf(r, step, p))); err != nil {
				return err
			}
			if err := after(step, tensors(p)); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		out[r] = p
		return nil
	}))
	return out
}

// withDiLoCo is run's sync for a DiLoCo of o.
func withDiLoCo(o diloco.Options) func(ctx context.Context, g pg.ProcessGroup) (func(int, []pg.Tensor) error,
	func() error, error) {
	return func(ctx context.Context, g pg.ProcessGroup) (func(int, []pg.Tensor) error, func() error, error) {
		d, err := diloco.New(g, tensors(initial()), o)
		if err != nil {
			return nil, nil, err
		}
		after := func(_ int, params []pg.Tensor) error { _, err := d.Step(ctx, params); return err }
		return after, func() error { return d.Close(ctx) }, nil
	}
}

// With outer rate 1 and no momentum DiLoCo is parameter averaging every H
// inner steps: bitwise torch's PeriodicModelAverager (period H, warmup
// H−1, so that it averages after the H-th step).
func TestDiLoCoIsAveraging(t *testing.T) {
	for _, inner := range []string{"sgd", "adamw"} {
		for _, H := range []int{1, 3, 5} {
			t.Run(fmt.Sprintf("%s/H=%d", inner, H), func(t *testing.T) {
				got := run(t, 3, 17, inner, withDiLoCo(diloco.Options{SyncEvery: H, OuterLR: optim.Set(1),
					OuterMomentum: optim.Set(0)}))
				want := run(t, 3, 17, inner, func(ctx context.Context, g pg.ProcessGroup) (func(int, []pg.Tensor) error,
					func() error, error) {
					a, err := averaging.NewPeriodicModelAverager(g, averaging.PeriodicOptions{Period: H, WarmupSteps: H - 1})
					after := func(_ int, params []pg.Tensor) error { _, err := a.AverageParameters(ctx, params); return err }
					return after, func() error { return nil }, err
				})
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("DiLoCo with lr 1, momentum 0: %v\nthe averager: %v", got, want)
				}
			})
		}
	}
}

// replay is the algorithm of Note [DiLoCo step by step], written out in
// one process over every rank's parameters: the reference.
type replay struct {
	o       diloco.Options
	lr, mom float64
	frags   [][]int
	global  [][]float64
	buf     [][]float64 // per fragment, the average in flight
	pending []bool
	moment  [][]float64 // the outer momentum per parameter
	started []bool
}

func (p *replay) step(t int, local [][][]float64) {
	H, n := p.o.SyncEvery, float64(len(local))
	for f, ps := range p.frags {
		off := H * (f + 1) / len(p.frags)
		if t >= off && (t-off)%H == 0 {
			p.buf[f], p.pending[f] = nil, true
			for _, i := range ps {
				for k := range p.global[i] {
					var s float64
					for r := range local {
						s += (p.global[i][k] - local[r][i][k]) / n
					}
					p.buf[f] = append(p.buf[f], s)
				}
			}
		}
	}
	for f := range p.frags {
		off := H*(f+1)/len(p.frags) + p.o.Delay
		if p.pending[f] && t >= off && (t-off)%H == 0 {
			p.apply(f, local)
		}
	}
}

// flush applies every fragment in flight, in order (DiLoCo.Flush).
func (p *replay) flush(local [][][]float64) {
	for f := range p.frags {
		if p.pending[f] {
			p.apply(f, local)
		}
	}
}

// apply is fragment f's arrival: the outer step on the global parameters,
// then the mixing into every rank's.
func (p *replay) apply(f int, local [][][]float64) {
	p.pending[f] = false
	j := 0
	for _, i := range p.frags[f] {
		for k := range p.global[i] {
			g := p.buf[f][j]
			j++
			if p.mom > 0 { // torch's SGD: buf = μ·buf + g (g at first), Nesterov g + μ·buf
				if !p.started[i] {
					p.moment[i][k] = g
				} else {
					p.moment[i][k] = p.mom*p.moment[i][k] + g
				}
				g += p.mom * p.moment[i][k]
			}
			p.global[i][k] -= p.lr * g
			for r := range local {
				local[r][i][k] = p.o.Alpha*local[r][i][k] + (1-p.o.Alpha)*p.global[i][k]
			}
		}
		p.started[i] = true
	}
}

// replayRun trains the ranks one after another in one process under the
// replay, and returns every rank's parameters; with flush, after the
// fragments still in flight have been applied.
func replayRun(t *testing.T, ranks, steps int, inner string, o diloco.Options, frags [][]int,
	flush bool) [][][]float64 {
	p := &replay{o: o, lr: *o.OuterLR, mom: *o.OuterMomentum, frags: frags, global: initial(),
		buf: make([][]float64, len(frags)), pending: make([]bool, len(frags)), started: make([]bool, len(sizes))}
	for _, n := range sizes {
		p.moment = append(p.moment, make([]float64, n))
	}
	local := make([][][]float64, ranks)
	opts := make([]optim.Optimizer, ranks)
	for r := range local {
		local[r] = initial()
		var err error
		if opts[r], err = optim.NewWith(inner, optim.Options{LR: optim.Set(0.05)}, len(sizes)); err != nil {
			t.Fatal(err)
		}
	}
	for step := range steps {
		for r := range local {
			if err := opts[r].Step(tensors(local[r]), tensors(gradOf(r, step, local[r]))); err != nil {
				t.Fatal(err)
			}
		}
		p.step(step+1, local)
	}
	if flush {
		p.flush(local)
	}
	return local
}

// DiLoCo and Streaming DiLoCo end where the one-process replay of the
// algorithm ends, within 1e-12: inner SGD and AdamW, H 5 and 10, one
// fragment and two and three with delays and mixing.
func TestDiLoCoMatchesReplay(t *testing.T) {
	cases := []struct {
		H, F, delay int
		alpha       float64
		inner       string
	}{
		{5, 1, 0, 0, "sgd"}, {10, 1, 0, 0, "adamw"}, {10, 2, 2, 0, "adamw"}, {9, 3, 1, 0.5, "sgd"}, {6, 2, 0, 0.25, "adam"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("H=%d/F=%d/delay=%d/alpha=%v/%s", c.H, c.F, c.delay, c.alpha, c.inner), func(t *testing.T) {
			o := diloco.Options{SyncEvery: c.H, Fragments: c.F, Delay: c.delay, Alpha: c.alpha,
				OuterLR: optim.Set(0.7), OuterMomentum: optim.Set(0.9)}
			probe, err := diloco.New(testworld.Local(t, 1)[0], tensors(initial()), o)
			if err != nil {
				t.Fatal(err)
			}
			got := run(t, 3, 4*c.H+3, c.inner, withDiLoCo(o))
			want := replayRun(t, 3, 4*c.H+3, c.inner, o, probe.Fragments(), false)
			for r := range want {
				for i := range want[r] {
					for k := range want[r][i] {
						if d := math.Abs(got[r][i][k] - want[r][i][k]); d > 1e-12 {
							t.Fatalf("rank %d parameter %d[%d]: %v, the replay %v (fragments %v)", r, i, k, got[r][i][k],
								want[r][i][k], probe.Fragments())
						}
					}
				}
			}
			if fmt.Sprint(got[0]) == fmt.Sprint(initial()) {
				t.Fatal("nothing trained")
			}
		})
	}
}

// Flush at a run's end applies the fragments still in flight, as the
// replay does: Streaming DiLoCo with delays (whose last fragments are in
// flight when the run ends) and int8, ending within 1e-12 of the replay
// (int8: its own rounding, checked against DiLoCo without Flush).
func TestDiLoCoFlush(t *testing.T) {
	for _, c := range []struct {
		H, F, delay int
		alpha       float64
	}{{10, 2, 3, 0}, {9, 3, 2, 0.5}, {6, 1, 2, 0}} {
		t.Run(fmt.Sprintf("H=%d/F=%d/delay=%d/alpha=%v", c.H, c.F, c.delay, c.alpha), func(t *testing.T) {
			o := diloco.Options{SyncEvery: c.H, Fragments: c.F, Delay: c.delay, Alpha: c.alpha,
				OuterLR: optim.Set(0.7), OuterMomentum: optim.Set(0.9)}
			probe, err := diloco.New(testworld.Local(t, 1)[0], tensors(initial()), o)
			if err != nil {
				t.Fatal(err)
			}
			steps := 4*c.H + 1 // the last fragments were sent within the delay
			got := run(t, 3, steps, "adamw", withFlush(o, steps))
			want := replayRun(t, 3, steps, "adamw", o, probe.Fragments(), true)
			unflushed := replayRun(t, 3, steps, "adamw", o, probe.Fragments(), false)
			if fmt.Sprint(want) == fmt.Sprint(unflushed) {
				t.Fatal("nothing was in flight at the end: the case tests nothing")
			}
			for r := range want {
				for i := range want[r] {
					for k := range want[r][i] {
						if d := math.Abs(got[r][i][k] - want[r][i][k]); d > 1e-12 {
							t.Fatalf("rank %d parameter %d[%d]: %v, the replay %v", r, i, k, got[r][i][k], want[r][i][k])
						}
					}
				}
			}
		})
	}
	t.Run("int8", func(t *testing.T) { // the int8 reduction's two collectives, flushed after the first
		o := diloco.Options{SyncEvery: 6, Fragments: 2, Delay: 1, OuterLR: optim.Set(0.7),
			OuterMomentum: optim.Set(0.9)}
		full := run(t, 3, 24, "sgd", withFlush(o, 24))
		o.Int8 = true
		flushed, plain := run(t, 3, 24, "sgd", withFlush(o, 24)), run(t, 3, 24, "sgd", withDiLoCo(o))
		var worst float64
		for r := range full {
			for i := range full[r] {
				for k := range full[r][i] {
					worst = max(worst, math.Abs(flushed[r][i][k]-full[r][i][k]))
				}
			}
		}
		if worst > 3e-2 || worst == 0 || fmt.Sprint(flushed) == fmt.Sprint(plain) {
			t.Fatalf("int8 flushed: %g from the float64 flushed run, want in (0, 3e-2]; equal to unflushed: %t",
				worst, fmt.Sprint(flushed) == fmt.Sprint(plain))
		}
	})
}

// withFlush is withDiLoCo that calls Flush after the last of steps.
func withFlush(o diloco.Options, steps int) func(ctx context.Context, g pg.ProcessGroup) (func(int, []pg.Tensor) error,
	func() error, error) {
	return func(ctx context.Context, g pg.ProcessGroup) (func(int, []pg.Tensor) error, func() error, error) {
		d, err := diloco.New(g, tensors(initial()), o)
		if err != nil {
			return nil, nil, err
		}
		after := func(step int, params []pg.Tensor) error {
			if _, err := d.Step(ctx, params); err != nil || step < steps-1 {
				return err
			}
			applied, err := d.Flush(ctx, params)
			if err == nil && len(applied) == 0 {
				err = errors.New("Flush applied nothing")
			}
			return err
		}
		return after, func() error { return d.Close(ctx) }, nil
	}
}

// A run stopped at any inner step (inside a delay window included) and
// resumed from State, the inner optimizer's state and the local
// parameters into fresh objects ends bitwise where the uninterrupted run
// ends.
func TestDiLoCoResume(t *testing.T) {
	for _, int8 := range []bool{false, true} {
		o := diloco.Options{SyncEvery: 8, Fragments: 2, Delay: 2, Alpha: 0.3, Int8: int8}
		t.Run(fmt.Sprintf("int8=%v", int8), func(t *testing.T) { resumeCase(t, o) })
	}
}

// resumeCase is TestDiLoCoResume for one set of options.
func resumeCase(t *testing.T, o diloco.Options) {
	const steps = 30
	want := run(t, 2, steps, "adamw", withDiLoCo(o))
	for _, stop := range []int{4, 5, 9, 16} { // fragment 0 is sent at 4 and applied at 6, fragment 1 at 8 and 10
		t.Run(fmt.Sprint(stop), func(t *testing.T) {
			ctx := testworld.Ctx(t)
			gs := testworld.Local(t, 2)
			got := make([][][]float64, 2)
			testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
				var saved diloco.State
				var inner optim.State
				p := initial()
				for leg, span := range [][2]int{{0, stop}, {stop, steps}} {
					opt, err := optim.NewWith("adamw", optim.Options{LR: optim.Set(0.05)}, len(sizes))
					if err != nil {
						return err
					}
					d, err := diloco.New(g, tensors(initial()), o)
					if err != nil {
						return err
					}
					if leg == 1 {
						if err := opt.Load(inner); err != nil {
							return err
						}
						if err := d.Load(saved); err != nil {
							return err
						}
					}
					for step := span[0]; step < span[1]; step++ {
						if err := opt.Step(tensors(p), tensors(gradOf(r, step, p))); err != nil {
							return err
						}
						if _, err := d.Step(ctx, tensors(p)); err != nil {
							return err
						}
					}
					if saved, err = d.State(ctx); err != nil {
						return err
					}
					inner, p = opt.State(), copyOf(p)
					if err := d.Close(ctx); err != nil {
						return err
					}
				}
				got[r] = p
				return nil
			}))
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("resumed at inner step %d: %v\nuninterrupted: %v", stop, got, want)
			}
		})
	}
}

// Pseudo-gradients sent in float16, bfloat16 or int8 land within their
// rounding of the full-precision run (and not on it).
func TestDiLoCoQuantize(t *testing.T) {
	full := run(t, 3, 20, "sgd", withDiLoCo(diloco.Options{SyncEvery: 5}))
	for _, q := range []struct {
		name string
		o    diloco.Options
		tol  float64
	}{
		{"float16", diloco.Options{SyncEvery: 5, Quantize: pg.Float16}, 5e-3},
		{"bfloat16", diloco.Options{SyncEvery: 5, Quantize: pg.BFloat16}, 3e-2},
		{"int8", diloco.Options{SyncEvery: 5, Int8: true}, 3e-2},
	} {
		t.Run(q.name, func(t *testing.T) {
			got := run(t, 3, 20, "sgd", withDiLoCo(q.o))
			var worst float64
			for r := range got {
				for i := range got[r] {
					for k := range got[r][i] {
						worst = max(worst, math.Abs(got[r][i][k]-full[r][i][k]))
					}
				}
			}
			if worst > q.tol || worst == 0 {
				t.Fatalf("%s: the largest difference from the float64 run is %g, want in (0, %g]", q.name, worst, q.tol)
			}
		})
	}
}

// New refuses options and parameters it cannot run, saying what to change.
func TestDiLoCoRefuses(t *testing.T) {
	g := testworld.Local(t, 1)[0]
	p := tensors(initial())
	for _, c := range []struct {
		o    diloco.Options
		want string
	}{
		{diloco.Options{}, "SyncEvery 0"},
		{diloco.Options{SyncEvery: 2, Fragments: 3}, "Fragments 3"},
		{diloco.Options{SyncEvery: 4, Fragments: 2, Delay: 2}, "Delay 2"},
		{diloco.Options{SyncEvery: 4, Alpha: 1.5}, "Alpha 1.5"},
		{diloco.Options{SyncEvery: 4, Quantize: pg.Int32}, "Quantize"},
		{diloco.Options{SyncEvery: 4, Quantize: pg.Float16, Int8: true}, "give one of them"},
		{diloco.Options{SyncEvery: 4, OuterLR: optim.Set(-1)}, "numbers >= 0"},
		{diloco.Options{SyncEvery: 8, Fragments: 5}, "at most one fragment per parameter"},
	} {
		if _, err := diloco.New(g, p, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.o, err, c.want)
		}
	}
	mixed := []pg.Tensor{pg.Float64s([]float64{1}), pg.Float32s([]float32{1})}
	_, err := diloco.New(g, mixed, diloco.Options{SyncEvery: 2})
	if err == nil || !strings.Contains(err.Error(), "one dtype") {
		t.Errorf("mixed dtypes: %v", err)
	}
	d, err := diloco.New(g, p, diloco.Options{SyncEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Step(testworld.Ctx(t), p[:2]); err == nil {
		t.Error("Step with 2 of 4 parameters: no error")
	}
}

// With uneven inputs (Options.Uneven) ranks that run out of batches call
// StepJoined for the others' remaining steps: every average is over the
// ranks still training, as a one-process replay of that rule gives within
// 1e-12, and every rank ends with the same global parameters.
func TestDiLoCoUneven(t *testing.T) {
	batches := []int{13, 9, 5}
	for _, o := range []diloco.Options{
		{SyncEvery: 4, Uneven: true},
		{SyncEvery: 6, Fragments: 2, Delay: 1, Alpha: 0.5, Uneven: true},
		{SyncEvery: 4, Uneven: true, Quantize: pg.BFloat16},
	} {
		o.OuterLR, o.OuterMomentum = optim.Set(0.7), optim.Set(0.9)
		t.Run(fmt.Sprintf("H=%d/F=%d/q=%v", o.SyncEvery, o.Fragments, o.Quantize), func(t *testing.T) {
			probe, err := diloco.New(testworld.Local(t, 1)[0], tensors(initial()), o)
			if err != nil {
				t.Fatal(err)
			}
			got := unevenRun(t, batches, o)
			want := unevenReplay(t, batches, o, probe.Fragments())
			tol := 1e-12
			if o.Quantize != 0 {
				tol = 5e-2
			}
			for i := range want {
				for k := range want[i] {
					if d := math.Abs(got[0][i][k] - want[i][k]); d > tol {
						t.Fatalf("global parameter %d[%d]: %v, the replay %v", i, k, got[0][i][k], want[i][k])
					}
				}
			}
			for r := range got {
				if fmt.Sprint(got[r]) != fmt.Sprint(got[0]) {
					t.Fatalf("rank %d's global parameters differ from rank 0's", r)
				}
			}
		})
	}
}

// unevenRun trains rank r for batches[r] inner steps and then joins until
// the longest is done; it returns every rank's global parameters.
func unevenRun(t *testing.T, batches []int, o diloco.Options) [][][]float64 {
	ctx := testworld.Ctx(t)
	gs := testworld.Local(t, len(batches))
	out := make([][][]float64, len(batches))
	longest := slices.Max(batches)
	testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
		p := initial()
		opt, err := optim.NewWith("sgd", optim.Options{LR: optim.Set(0.05)}, len(sizes))
		if err != nil {
			return err
		}
		d, err := diloco.New(g, tensors(p), o)
		if err != nil {
			return err
		}
		defer d.Close(ctx)
		for step := range longest {
			if step >= batches[r] {
				if _, err := d.StepJoined(ctx, tensors(p)); err != nil {
					return err
				}
				continue
			}
			if err := opt.Step(tensors(p), tensors(gradOf(r, step, p))); err != nil {
				return err
			}
			if _, err := d.Step(ctx, tensors(p)); err != nil {
				return err
			}
		}
		if err := d.Close(ctx); err != nil {
			return err
		}
		for _, g := range d.Global() {
			out[r] = append(out[r], diloco.Widen(g))
		}
		return nil
	}))
	return out
}

// unevenReplay is replayRun with ranks that stop: each average is over
// the ranks still training at the send, and a stopped rank takes the
// global parameters on every arrival. It returns the global parameters.
func unevenReplay(t *testing.T, batches []int, o diloco.Options, frags [][]int) [][]float64 {
	t.Helper()
	g := initial()
	local := make([][][]float64, len(batches))
	opts := make([]optim.Optimizer, len(batches))
	for r := range local {
		local[r] = initial()
		var err error
		if opts[r], err = optim.NewWith("sgd", optim.Options{LR: optim.Set(0.05)}, len(sizes)); err != nil {
			t.Fatal(err)
		}
	}
	outer := make([]optim.Optimizer, len(frags))
	for f, ps := range frags {
		var err error
		oo := optim.Options{LR: o.OuterLR, Momentum: o.OuterMomentum, Nesterov: *o.OuterMomentum > 0}
		if outer[f], err = optim.NewWith("sgd", oo, len(ps)); err != nil {
			t.Fatal(err)
		}
	}
	sent := make([][][]float64, len(frags))
	H, F := o.SyncEvery, len(frags)
	for step := range slices.Max(batches) {
		t1 := step + 1
		for r := range local {
			if step < batches[r] {
				if err := opts[r].Step(tensors(local[r]), tensors(gradOf(r, step, local[r]))); err != nil {
					t.Fatal(err)
				}
			}
		}
		for f, ps := range frags {
			if off := H * (f + 1) / F; t1 >= off && (t1-off)%H == 0 {
				sent[f] = averageDelta(g, local, ps, step, batches)
			}
		}
		for f, ps := range frags {
			off := H*(f+1)/F + o.Delay
			if sent[f] == nil || t1 < off || (t1-off)%H != 0 {
				continue
			}
			globals := make([]pg.Tensor, len(ps))
			for k, i := range ps {
				globals[k] = pg.Float64s(g[i])
			}
			if err := outer[f].Step(globals, tensors(sent[f])); err != nil {
				t.Fatal(err)
			}
			sent[f] = nil
			for r := range local {
				alpha := o.Alpha
				if step >= batches[r] {
					alpha = 0
				}
				for _, i := range ps {
					for k := range g[i] {
						local[r][i][k] = alpha*local[r][i][k] + (1-alpha)*g[i][k]
					}
				}
			}
		}
	}
	return g
}

// averageDelta is the mean of global − local over the ranks training at
// step, for the parameters ps, summed and then divided.
func averageDelta(g [][]float64, local [][][]float64, ps []int, step int, batches []int) [][]float64 {
	out := make([][]float64, len(ps))
	count := 0
	for r := range local {
		if step < batches[r] {
			count++
		}
	}
	for k, i := range ps {
		out[k] = make([]float64, len(g[i]))
		for r := range local {
			if step >= batches[r] {
				continue
			}
			for e := range g[i] {
				out[k][e] += g[i][e] - local[r][i][e]
			}
		}
		for e := range out[k] {
			out[k][e] /= float64(count)
		}
	}
	return out
}
