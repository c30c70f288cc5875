package main

// The optimizer's hyperparameters, the learning-rate schedule and gradient
// clipping (issue 36), as flags named after torch's arguments. Each maps
// onto optim (docs/optimizers.md): the hyperparameters onto optim.Options,
// the schedule onto optim.Recipe, clipping onto optim.ClipNorm and
// optim.ClipGradValue.
//
// A flag the chosen optimizer or schedule does not take is refused naming
// it (Note [no flag is ignored]); a flag left out takes torch 1.13's
// default for that optimizer. The rate the schedule gives is set on the
// optimizer before every step, and the schedule is stepped after it, so
// the rate at step t is what torch's scheduler gives after t calls of
// scheduler.step(). Clipping runs on the averaged gradients (after the
// mean over --grad-accum's micro-batches), which every rank holds
// bitwise equal, so every rank clips identically without communicating.

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
)

// optimFlags are --momentum … --clip-grad-value.
type optimFlags struct {
	momentum, dampening, weightDecay, eps float64
	nesterov                              bool
	betas                                 string
	lrSchedule                            string
	warmupSteps, lrStepSize               int
	warmupStartFactor, minLR, lrGamma     float64
	clipGradNorm, clipGradValue           float64
	zero                                  bool   // --zero: optim.Zero's sharded state
	zeroOverlap                           string // --zero-overlap: off, interleaved, deferred (zerooverlap.go)
	zeroReduce                            bool   // --zero-reduce-to-owners: ZeRO-2's communication
}

// schedRun is a session's learning-rate schedule.
type schedRun struct {
	sched *optim.Schedule // --lr-schedule's, made by run once the run's steps are known
	total int             // the run's optimizer steps, S
	// a resumed checkpoint's schedule position, name, S and --lr; nil and "" without
	schedState                     []float64
	schedName, schedSteps, schedLR string
}

// scheduleStateKey keys the schedule's position, [Step calls, next rate],
// in a checkpoint's Extra, and its name in the checkpoint's Meta;
// scheduleStepsKey keys, in Meta, the run's steps S the schedule was made
// for.
const (
	scheduleStateKey = "lr_schedule"
	scheduleStepsKey = "lr_schedule_steps"
)

func (o *optimFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&o.momentum, "momentum", 0, "SGD's momentum (--optimizer sgd: default 0; momentum: 0.9)")
	fs.Float64Var(&o.dampening, "dampening", 0, "SGD's dampening (--optimizer sgd, momentum)")
	fs.BoolVar(&o.nesterov, "nesterov", false, "Nesterov momentum (--optimizer sgd, momentum; needs momentum > 0 "+
		"and dampening 0)")
	fs.Float64Var(&o.weightDecay, "weight-decay", 0, "weight_decay: L2 added to the gradient (sgd, momentum, adam) or "+
		"decoupled (adamw; default 0.01 there)")
	fs.StringVar(&o.betas, "betas", "0.9,0.999", "Adam's betas B1,B2 (--optimizer adam, adamw)")
	fs.Float64Var(&o.eps, "eps", 1e-8, "Adam's eps (--optimizer adam, adamw)")
	fs.StringVar(&o.lrSchedule, "lr-schedule", "constant", "learning-rate schedule after the warmup: constant, cosine "+
		"(CosineAnnealingLR to --min-lr), linear (LinearLR to --min-lr) or step (StepLR); docs/optimizers.md")
	fs.IntVar(&o.warmupSteps, "warmup-steps", 0, "optimizer steps of linear warmup (LinearLR) before the schedule")
	fs.Float64Var(&o.warmupStartFactor, "warmup-start-factor", 1.0/3, "the warmup's start_factor: it starts at lr·F")
	fs.Float64Var(&o.minLR, "min-lr", 0, "the rate the schedule ends at: eta_min (--lr-schedule cosine), the "+
		"end rate (linear)")
	fs.IntVar(&o.lrStepSize, "lr-step-size", 0, "StepLR's step_size (--lr-schedule step needs it)")
	fs.Float64Var(&o.lrGamma, "lr-gamma", 0.1, "StepLR's gamma (--lr-schedule step)")
	fs.Float64Var(&o.clipGradNorm, "clip-grad-norm", 0, "clip the averaged gradients to this total 2-norm before each "+
		"step (torch's clip_grad_norm_; 0: off)")
	fs.BoolVar(&o.zero, "zero", false, "shard the optimizer state across the ranks (ZeRO stage 1, torch's "+
		"ZeroRedundancyOptimizer): each rank steps its own parameters and broadcasts them; the same results (not "+
		"with --comm-hook noop, which does not average)")
	fs.StringVar(&o.zeroOverlap, "zero-overlap", "off", "with --zero, step each bucket's parameters once its "+
		"reduction completes and broadcast them while later buckets reduce: interleaved (torch's "+
		"hook_with_zero_step_interleaved) or deferred (hook_with_zero_step: after backward); the same results")
	fs.BoolVar(&o.zeroReduce, "zero-reduce-to-owners", false, "with --zero-overlap, reduce each gradient to the rank "+
		"that steps it instead of allreducing it (ZeRO stage 2's communication; the sums agree to rounding)")
	fs.Float64Var(&o.clipGradValue, "clip-grad-value", 0, "clamp each averaged gradient element to ±V before each step "+
		"(torch's clip_grad_value_; 0: off)")
}

// optimizerOptions are the hyperparameter flags the command line gave,
// for optim.NewWith; the others take the optimizer's defaults.
func (c config) optimizerOptions() (optim.Options, error) {
	o := optim.Options{LR: optim.Set(c.lr), Nesterov: c.nesterov}
	for _, f := range []struct {
		name string
		v    float64
		into **float64
	}{{"momentum", c.momentum, &o.Momentum}, {"dampening", c.dampening, &o.Dampening},
		{"weight-decay", c.weightDecay, &o.WeightDecay}, {"eps", c.eps, &o.Eps}} {
		if c.given(f.name) {
			*f.into = optim.Set(f.v)
		}
	}
	if c.given("betas") {
		b1, b2, ok := strings.Cut(c.betas, ",")
		x, err1 := strconv.ParseFloat(strings.TrimSpace(b1), 64)
		y, err2 := strconv.ParseFloat(strings.TrimSpace(b2), 64)
		if !ok || err1 != nil || err2 != nil {
			return o, usagef("--betas %q: want two numbers B1,B2, e.g. 0.9,0.999", c.betas)
		}
		o.Betas = &[2]float64{x, y}
	}
	return o, nil
}

// optimizerFlags are the flags each optimizer does not take.
var optimizerFlags = []struct {
	flags      []string
	optimizers []string
}{
	{[]string{"momentum", "dampening", "nesterov"}, []string{"sgd", "momentum"}},
	{[]string{"betas", "eps"}, []string{"adam", "adamw"}},
}

// scheduleFlags are the flags only some schedules act on.
var scheduleFlags = []struct {
	flag      string
	schedules []string
}{
	{"min-lr", []string{"cosine", "linear"}},
	{"lr-step-size", []string{"step"}},
	{"lr-gamma", []string{"step"}},
}

// validateOptim checks the optimizer, schedule and clipping flags.
func (c config) validateOptim() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"momentum", c.momentum}, {"dampening", c.dampening}, {"weight-decay", c.weightDecay}, {"eps", c.eps},
		{"warmup-start-factor", c.warmupStartFactor}, {"min-lr", c.minLR}, {"lr-gamma", c.lrGamma},
		{"clip-grad-norm", c.clipGradNorm}, {"clip-grad-value", c.clipGradValue}} {
		if err := checkFinite("--"+f.name, f.v); err != nil {
			return err
		}
	}
	for _, check := range []func() error{c.validateOptimFlagUse, c.validateScheduleClip, c.validateZero} {
		if err := check(); err != nil {
			return err
		}
	}
	o, err := c.optimizerOptions()
	if err == nil {
		_, err = optim.NewWith(c.optimizer, o, 1)
	}
	if err != nil {
		return usagef("--optimizer %s: %s", c.optimizer, strings.TrimPrefix(err.Error(), "optim: "))
	}
	steps := c.warmupSteps + 1 // only cosine and linear need the run's steps
	if c.lrSchedule == "cosine" || c.lrSchedule == "linear" {
		if c.steps == 0 {
			return nil // --epochs: the workers know the steps, and newSchedule checks them
		}
		steps = c.steps
	}
	if _, err := optim.NewSchedule(c.recipe(steps)); err != nil {
		return usagef("--lr-schedule %s: %s", c.lrSchedule, strings.TrimPrefix(err.Error(), "optim: "))
	}
	return nil
}

// validateOptimFlagUse refuses a flag the optimizer or the schedule does
// not take (Note [no flag is ignored]).
func (c config) validateOptimFlagUse() error {
	for _, f := range optimizerFlags {
		for _, name := range f.flags {
			if c.given(name) && !slices.Contains(f.optimizers, c.optimizer) {
				return usagef("--%s does nothing with --optimizer %s; leave it out (it applies to --optimizer %s)", name,
					c.optimizer, strings.Join(f.optimizers, ", "))
			}
		}
	}
	for _, f := range scheduleFlags {
		if c.given(f.flag) && !slices.Contains(f.schedules, c.lrSchedule) {
			return usagef("--%s does nothing with --lr-schedule %s; leave it out (it applies to --lr-schedule %s)", f.flag,
				c.lrSchedule, strings.Join(f.schedules, ", "))
		}
	}
	return nil
}

// validateScheduleClip checks the schedule's and the clipping's values.
func (c config) validateScheduleClip() error {
	switch {
	case c.given("warmup-start-factor") && c.warmupSteps == 0:
		return usagef("--warmup-start-factor needs --warmup-steps: it is the warmup's first factor")
	case !slices.Contains(optim.ScheduleKinds(), c.lrSchedule):
		return usagef("--lr-schedule %q: want one of %s", c.lrSchedule, strings.Join(optim.ScheduleKinds(), ", "))
	case c.lrSchedule == "step" && c.lrStepSize < 1:
		return usagef("--lr-schedule step needs --lr-step-size N, N >= 1 (StepLR's step_size)")
	case c.warmupSteps < 0:
		return usagef("--warmup-steps %d: want >= 0", c.warmupSteps)
	case c.clipGradNorm < 0:
		return usagef("--clip-grad-norm %v: want a number > 0 (0: off)", c.clipGradNorm)
	case c.clipGradValue < 0:
		return usagef("--clip-grad-value %v: want a number > 0 (0: off)", c.clipGradValue)
	case c.clipGradNorm > 0 && c.clipGradValue > 0:
		return usagef("--clip-grad-norm and --clip-grad-value: give one of them")
	}
	return nil
}

// recipe is the schedule's description for a run of total optimizer steps.
func (c config) recipe(total int) optim.Recipe {
	r := optim.Recipe{Kind: c.lrSchedule, LR: c.lr, Steps: total, WarmupSteps: c.warmupSteps, MinLR: c.minLR,
		StepSize: c.lrStepSize, Gamma: optim.Set(c.lrGamma)}
	if c.given("warmup-start-factor") {
		r.WarmupStartFactor = optim.Set(c.warmupStartFactor)
	}
	return r
}

// newOptimizer is the optimizer the flags describe, for parameters of
// sizes[i] elements: with --zero, its state sharded over g.
func (c config) newOptimizer(g pg.ProcessGroup, sizes []int) (optim.Optimizer, error) {
	o, err := c.optimizerOptions()
	if err != nil {
		return nil, err
	}
	if c.zero {
		return optim.NewZero(g, c.optimizer, o, sizes, optim.ZeroOptions{Timeout: c.timeout})
	}
	opt, err := optim.NewWith(c.optimizer, o, len(sizes))
	if err != nil {
		return nil, usageError{err}
	}
	return opt, nil
}

// newSchedule is the run's schedule over total optimizer steps, moved to
// a resumed checkpoint's position when one was loaded.
func (s *session) newSchedule(c config, total int) error {
	sched, err := optim.NewSchedule(c.recipe(total))
	if err != nil {
		return usagef("--lr-schedule %s over %d steps: %s", c.lrSchedule, total, strings.TrimPrefix(err.Error(),
			"optim: "))
	}
	st := s.schedState
	if st == nil && s.start > 0 && (c.lrSchedule != "constant" || c.warmupSteps > 0) {
		return usagef("the checkpoint at step %d holds no learning-rate schedule state: it was written without "+
			"--lr-schedule and --warmup-steps; resume without them", s.start)
	}
	if saved := s.schedSteps; st != nil && saved != "" && saved != strconv.Itoa(total) &&
		(c.lrSchedule == "cosine" || c.lrSchedule == "linear") {
		return usagef("the checkpoint's --lr-schedule %s runs over %s steps, this run's over %d: give the --steps (or "+
			"--epochs) of the run it was written by, so that the schedule continues as it would have", c.lrSchedule,
			saved, total)
	}
	if lr := strconv.FormatFloat(c.lr, 'g', -1, 64); st != nil && s.schedLR != "" && s.schedLR != lr {
		return usagef("--lr %s: the checkpoint's schedule was made for --lr %s and continues from its own rate; resume "+
			"with --lr %s (--resume-allow-changes lr cannot change a schedule's rate)", lr, s.schedLR, s.schedLR)
	}
	if st != nil {
		if len(st) != 2 {
			return usagef("the checkpoint's %s state has %d values, want 2", scheduleStateKey, len(st))
		}
		if err := sched.Load(optim.ScheduleState{Name: s.schedName, Step: int(st[0]), LR: st[1]}); err != nil {
			return usageError{err}
		}
	}
	s.sched = sched
	return nil
}

// saveSchedule puts the schedule's position, name and steps into ck.
// A constant rate without warmup has no state to save: the checkpoint is
// what it was before schedules existed.
func (s *session) saveSchedule(c config, ck *checkpoint.Checkpoint, total int) {
	if s.sched == nil || (c.lrSchedule == "constant" && c.warmupSteps == 0) {
		return
	}
	if ck.Extra == nil {
		ck.Extra = map[string][]float64{}
	}
	st := s.sched.State()
	ck.Extra[scheduleStateKey] = []float64{float64(st.Step), st.LR}
	ck.Meta[scheduleStateKey], ck.Meta[scheduleStepsKey] = s.sched.Name(), strconv.Itoa(total)
}

// update clips the averaged gradients as the flags say, sets the
// schedule's rate, steps the optimizer and then the schedule.
func (s *session) update(ctx context.Context, c config, params, grads []pg.Tensor) error {
	switch {
	case c.clipGradNorm > 0:
		if _, err := optim.ClipGradNorm(grads, c.clipGradNorm, 2); err != nil {
			return err
		}
	case c.clipGradValue > 0:
		if err := optim.ClipGradValue(grads, c.clipGradValue); err != nil {
			return err
		}
	}
	if err := s.opt.SetLR(s.sched.LR()); err != nil {
		return fmt.Errorf("the schedule's rate: %w", err)
	}
	step := s.opt.Step
	if z, ok := s.opt.(*optim.Zero); ok {
		step = func(params, grads []pg.Tensor) error { return z.StepContext(ctx, params, grads) }
	}
	if err := step(params, grads); err != nil {
		return err
	}
	s.sched.Step()
	return nil
}
