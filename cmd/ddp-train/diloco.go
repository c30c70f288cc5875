package main

import (
	"context"
	"flag"
	"time"

	"github.com/goddp/ddp/diloco"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
)

// dilocoFlags are --diloco-sync-every … --diloco-quantize.
type dilocoFlags struct {
	syncEvery, fragments, delay int
	outerLR, outerMomentum      float64
	alpha                       float64
	quantize                    string
}

// dilocoQuantize are --diloco-quantize's values and their dtypes.
var dilocoQuantize = map[string]pg.Dtype{"none": 0, "fp16": pg.Float16, "bf16": pg.BFloat16}

func (d *dilocoFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&d.syncEvery, "diloco-sync-every", 0, "DiLoCo: no gradient communication; every H inner steps "+
		"average the pseudo-gradients (global minus local parameters) and take an outer Nesterov step "+
		"(docs/diloco.md; 0: off, plain DDP)")
	fs.Float64Var(&d.outerLR, "outer-lr", 0.7, "DiLoCo's outer learning rate")
	fs.Float64Var(&d.outerMomentum, "outer-momentum", 0.9, "DiLoCo's outer Nesterov momentum (0: plain SGD)")
	fs.IntVar(&d.fragments, "diloco-fragments", 1, "Streaming DiLoCo: fragments synchronised at staggered steps")
	fs.IntVar(&d.delay, "diloco-delay", 0, "Streaming DiLoCo: inner steps a fragment's reduction overlaps")
	fs.Float64Var(&d.alpha, "diloco-alpha", 0, "Streaming DiLoCo: on arrival a fragment becomes "+
		"A·local + (1−A)·global")
	fs.StringVar(&d.quantize, "diloco-quantize", "none", "the pseudo-gradients' dtype on the wire: none, fp16 or bf16")
}

// dilocoOnly are the flags that do nothing without --diloco-sync-every.
var dilocoOnly = []string{"outer-lr", "outer-momentum", "diloco-fragments", "diloco-delay", "diloco-alpha",
	"diloco-quantize"}

// validateDiLoCo checks the DiLoCo flags and what DiLoCo cannot run with
// yet.
func (c config) validateDiLoCo() error {
	if c.syncEvery == 0 {
		for _, f := range dilocoOnly {
			if c.given(f) {
				return usagef("--%s does nothing without --diloco-sync-every H", f)
			}
		}
		return nil
	}
	if _, ok := dilocoQuantize[c.quantize]; !ok {
		return usagef("--diloco-quantize %q: want none, fp16 or bf16", c.quantize)
	}
	refused := []struct {
		on     bool
		flag   string
		reason string
	}{
		{c.syncEvery < 0, "diloco-sync-every", "want 0 (off) or H >= 1 inner steps"},
		{c.zero, "zero", "DiLoCo's inner optimizers are each rank's own: there is nothing to shard"},
		{c.commHook != "allreduce", "comm-hook", "DiLoCo's inner steps communicate no gradients"},
		{c.checkpointDir != "", "checkpoint", "DiLoCo's checkpoints, with every rank's inner state, are not built yet"},
		{c.given("eval-every"), "eval-every", "the ranks' parameters differ between synchronisations; the " +
			"held-out set is scored once, on the global parameters, after the last step"},
		{c.onNonFinite == "skip", "on-nonfinite", "each rank's gradients are its own, so the ranks would not agree " +
			"on a step to skip"},
	}
	for _, r := range refused {
		if r.on {
			return usagef("--diloco-sync-every and --%s: %s", r.flag, r.reason)
		}
	}
	if err := c.dilocoOptions().Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// dilocoOptions are the flags as diloco.Options.
func (c config) dilocoOptions() diloco.Options {
	return diloco.Options{SyncEvery: c.syncEvery, OuterLR: optim.Set(c.outerLR),
		OuterMomentum: optim.Set(c.outerMomentum), Fragments: c.fragments, Delay: c.delay, Alpha: c.alpha,
		Quantize: dilocoQuantize[c.quantize]}
}

// dilocoRun is a session's DiLoCo: nil without --diloco-sync-every.
type dilocoRun struct {
	dl         *diloco.DiLoCo
	outerSteps int           // fragments applied
	bytesSent  int64         // pseudo-gradient bytes this rank sent
	syncTime   time.Duration // time in DiLoCo's Step
}

// newDiLoCo starts DiLoCo from the parameters as they are: the same on
// every rank after Wrap's broadcast.
func (s *session) newDiLoCo(c config, g pg.ProcessGroup) error {
	if c.syncEvery == 0 {
		return nil
	}
	params, err := s.ddp.ParamTensors()
	if err != nil {
		return err
	}
	s.dl = &dilocoRun{}
	s.dl.dl, err = diloco.New(g, params, c.dilocoOptions())
	return err
}

// dilocoStep counts the inner step just taken (Note [DiLoCo step by step],
// package diloco).
func (s *session) dilocoStep(ctx context.Context, params []pg.Tensor) error {
	if s.dl == nil {
		return nil
	}
	start := time.Now()
	before := s.dl.dl.BytesSent()
	applied, err := s.dl.dl.Step(ctx, params)
	s.dl.syncTime += time.Since(start)
	s.dl.outerSteps += len(applied)
	s.dl.bytesSent += s.dl.dl.BytesSent() - before
	return err
}

// dilocoFinish ends a DiLoCo run: the reductions in flight are waited for,
// and the parameters become the global ones, the model the run trained
// (what --save, the final evaluation and the digest see).
func (s *session) dilocoFinish(ctx context.Context) error {
	if s.dl == nil {
		return nil
	}
	if err := s.dl.dl.Close(ctx); err != nil {
		return err
	}
	params, err := s.ddp.ParamTensors()
	if err != nil {
		return err
	}
	for i, g := range s.dl.dl.Global() {
		copy(params[i].Data, g.Data)
	}
	return nil
}

// replicaValues are what the replica check compares: the global
// parameters under DiLoCo (every rank holds the same at every step), the
// parameters otherwise.
func (s *session) replicaValues() ([]pg.Tensor, error) {
	if s.dl != nil {
		return s.dl.dl.Global(), nil
	}
	return s.ddp.ParamTensors()
}

// setDiLoCo fills the summary's DiLoCo figures.
func (s *summary) setDiLoCo(d *dilocoRun) {
	if d == nil {
		return
	}
	s.DiLoCoOuterSteps, s.DiLoCoBytesSent, s.DiLoCoSyncSeconds = d.outerSteps, d.bytesSent, d.syncTime.Seconds()
}
