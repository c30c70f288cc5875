package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/ddp/diloco"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/timeline"
	"github.com/prometheus/client_golang/prometheus"
)

// dilocoFlags are --diloco-sync-every … --diloco-quantize.
type dilocoFlags struct {
	syncEvery, fragments, delay int
	outerLR, outerMomentum      float64
	alpha                       float64
	quantize                    string
}

// dilocoQuantize are --diloco-quantize's values and their dtypes ("int8":
// diloco.Options.Int8).
var dilocoQuantize = map[string]pg.Dtype{"none": 0, "fp16": pg.Float16, "bf16": pg.BFloat16, "int8": 0}

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
	fs.StringVar(&d.quantize, "diloco-quantize", "none", "the pseudo-gradients on the wire: none, fp16, bf16, or int8 "+
		"(a float32 scale per 256 values, reduce-scattered and allgathered)")
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
		return usagef("--diloco-quantize %q: want none, fp16, bf16 or int8", c.quantize)
	}
	refused := []struct {
		on     bool
		flag   string
		reason string
	}{
		{c.syncEvery < 0, "diloco-sync-every", "want 0 (off) or H >= 1 inner steps"},
		{c.zero, "zero", "DiLoCo's inner optimizers are each rank's own: there is nothing to shard"},
		{c.commHook != "allreduce", "comm-hook", "DiLoCo's inner steps communicate no gradients"},
		{c.given("eval-every"), "eval-every", "the ranks' parameters differ between synchronisations; the " +
			"held-out set is scored once, on the global parameters, after the last step"},
		{c.onNonFinite == "skip", "on-nonfinite", "each rank's gradients are its own, so the ranks would not agree " +
			"on a step to skip"},
		{!c.findOrigin, "find-nonfinite-origin=false", "each rank's gradients are its own, and the origin check, " +
			"which agrees on a non-finite one with an allreduce, is what stops every rank at the same step"},
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
		Quantize: dilocoQuantize[c.quantize], Int8: c.quantize == "int8"}
}

// dilocoRun is a session's DiLoCo: nil without --diloco-sync-every.
type dilocoRun struct {
	dl         *diloco.DiLoCo
	group      pg.ProcessGroup // DiLoCo's own (newDiLoCo), nil when it shares the training group
	outerSteps int             // fragments applied
	bytesSent  int64           // pseudo-gradient bytes this rank sent
	syncTime   time.Duration   // time in DiLoCo's Step
}

// newDiLoCo starts DiLoCo from the parameters as they are: the same on
// every rank after Wrap's broadcast. Its reductions run on a group of
// their own where g can make one (pg.Splitter: tcp, local, MPI), so that a
// fragment's reduction in flight does not hold up the step's other
// collectives (the stop check) and --diloco-delay hides it; otherwise on
// g itself.
func (s *session) newDiLoCo(ctx context.Context, c config, g pg.ProcessGroup) error {
	if c.syncEvery == 0 || c.faultTolerant { // --fault-tolerant: ftdiloco.go's own
		return nil
	}
	params, err := s.eng.ParamTensors()
	if err != nil {
		return err
	}
	s.dl = &dilocoRun{}
	dg := g
	var sp pg.Splitter
	if pg.As(g, &sp) {
		if s.dl.group, err = sp.NewGroup(ctx, everyRank(g.Size())); err != nil {
			return fmt.Errorf("--diloco-sync-every: DiLoCo's own group: %w", err)
		}
		dg = s.dl.group
	}
	if s.dl.dl, err = diloco.New(dg, params, c.dilocoOptions()); err != nil {
		return err
	}
	return s.dilocoResume(c, g.Rank(), g.Size(), params)
}

// dilocoMetrics are DiLoCo's counters, ddp_diloco_*.
type dilocoMetrics struct {
	dilocoOuter, dilocoBytes, dilocoSeconds prometheus.Counter
}

func newDiLoCoMetrics() dilocoMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ddp", Subsystem: "diloco", Name: name,
			Help: help})
	}
	return dilocoMetrics{
		dilocoOuter: c("outer_steps_total", "DiLoCo fragments applied by an outer step (--diloco-sync-every)."),
		dilocoBytes: c("sent_bytes_total", "Pseudo-gradient bytes this rank handed to DiLoCo's allreduces."),
		dilocoSeconds: c("sync_seconds_total", "Seconds this rank spent in DiLoCo's steps: sending, waiting for "+
			"and applying the pseudo-gradients."),
	}
}

// dilocoStep counts the inner step just taken (Note [DiLoCo step by step],
// package diloco), with its figures in the summary, the metrics and the
// timeline (a "diloco" slice on the reducer's lane when the step sent or
// applied a fragment).
func (s *session) dilocoStep(ctx context.Context, params []pg.Tensor, m *trainingMetrics) error {
	if s.dl == nil {
		return nil
	}
	start, before := time.Now(), s.dl.dl.BytesSent()
	applied, err := s.dl.dl.Step(ctx, params)
	s.dilocoAccount(start, before, applied, m)
	return err
}

// dilocoAccount adds a Step's or the Flush's figures, which began at start
// with before bytes sent and applied the fragments applied, to the
// summary, the metrics and the timeline.
func (s *session) dilocoAccount(start time.Time, before int64, applied []int, m *trainingMetrics) {
	took, sent := time.Since(start), s.dl.dl.BytesSent()-before
	s.dl.syncTime += took
	s.dl.outerSteps += len(applied)
	s.dl.bytesSent += sent
	if m != nil {
		m.dilocoOuter.Add(float64(len(applied)))
		m.dilocoBytes.Add(float64(sent))
		m.dilocoSeconds.Add(took.Seconds())
	}
	if s.tl != nil && (sent > 0 || len(applied) > 0) {
		s.tl.Write(&timeline.Event{Name: "diloco", Lane: timeline.LaneReducer, Start: start, End: start.Add(took),
			Args: [3]timeline.Arg{{Key: "fragments_applied", Value: int64(len(applied))}, {Key: "bytes_sent",
				Value: sent}, {Key: "inner_step", Value: int64(s.dl.dl.StepCount())}}})
	}
}

// dilocoFinish ends a DiLoCo run: the fragments in flight (sent within
// --diloco-delay of the end) are applied (diloco.Flush), and the
// parameters become the global ones, the model the run trained (what
// --save, the final evaluation and the digest see).
func (s *session) dilocoFinish(ctx context.Context, m *trainingMetrics) error {
	if s.dl == nil {
		return nil
	}
	params, err := s.eng.ParamTensors()
	if err != nil {
		return err
	}
	start, before := time.Now(), s.dl.dl.BytesSent()
	applied, err := s.dl.dl.Flush(ctx, params)
	s.dilocoAccount(start, before, applied, m)
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
	return s.eng.ParamTensors()
}

// setDiLoCo fills the summary's DiLoCo figures. Its comm_hook is noop,
// the reducer's under DiLoCo (train.go), not the --comm-hook default.
func (s *summary) setDiLoCo(d *dilocoRun) {
	if d == nil {
		return
	}
	s.CommHook = "noop"
	s.DiLoCoOuterSteps, s.DiLoCoBytesSent, s.DiLoCoSyncSeconds = d.outerSteps, d.bytesSent, d.syncTime.Seconds()
}

// Note [DiLoCo in checkpoints]: the ranks' parameters and inner
// optimizers differ between synchronisations, so a checkpoint holds
// every rank's, gathered to rank 0 as the comm hooks' state is (Note
// [comm hook state in checkpoints], hooks.go): under diloco/rank<r>/,
// param/<i> and inner/<key> with inner_step. The checkpoint's model is
// the global parameters, what `ddp-train eval` and --init read; its
// optimizer state rank 0's inner one, what a resume without DiLoCo
// continues with. DiLoCo's own state, the same on every rank, is
// diloco/step, diloco/outer<f>/<key> with diloco/outer<f>/step, and
// diloco/pending<f> for a fragment in flight; Meta "diloco" records the
// settings. A resume with DiLoCo at the same settings and world size
// gives every rank back its own part and continues exactly; one from a
// checkpoint without DiLoCo starts DiLoCo from its parameters.

const (
	dilocoKey        = "diloco/"
	dilocoRankPrefix = "diloco/rank"
)

// dilocoLabel is the settings a DiLoCo checkpoint records.
func (c config) dilocoLabel() string {
	return fmt.Sprintf("H=%d outer_lr=%g outer_momentum=%g fragments=%d delay=%d alpha=%g quantize=%s",
		c.syncEvery, c.outerLR, c.outerMomentum, c.fragments, c.delay, c.alpha, c.quantize)
}

// dilocoCheckpoint is DiLoCo's part of a checkpoint: on rank 0 the extra
// vectors and the global parameters by index, nil elsewhere and without
// DiLoCo. Collective: it waits for the reductions in flight and gathers
// every rank's part.
func (s *session) dilocoCheckpoint(ctx context.Context, g pg.ProcessGroup) (map[string][]float64, [][]float64,
	error) {
	if s.dl == nil {
		return nil, nil, nil
	}
	st, err := s.dl.dl.State(ctx)
	if err != nil {
		return nil, nil, err
	}
	params, err := s.eng.ParamTensors()
	if err != nil {
		return nil, nil, err
	}
	mine := map[string][]float64{}
	for i, p := range params {
		mine["param/"+strconv.Itoa(i)] = diloco.Widen(p)
	}
	inner := s.opt.State()
	for k, v := range inner.Buffers {
		mine["inner/"+k] = v
	}
	mine["inner_step"] = []float64{float64(inner.Step)}
	extra, err := gatherRankState(ctx, g, mine, dilocoRankPrefix, "DiLoCo's per-rank state")
	if err != nil || g.Rank() != 0 {
		return nil, nil, err
	}
	extra[dilocoKey+"step"] = []float64{float64(st.Step)}
	for f, o := range st.Outer {
		pre := dilocoKey + "outer" + strconv.Itoa(f) + "/"
		extra[pre+"step"] = []float64{float64(o.Step)}
		for k, v := range o.Buffers {
			extra[pre+k] = v
		}
		if st.Pending[f] != nil {
			extra[dilocoKey+"pending"+strconv.Itoa(f)] = st.Pending[f]
		}
	}
	return extra, st.Global, nil
}

// dilocoResume gives DiLoCo, this rank's parameters and its inner
// optimizer their parts of the checkpoint resumed from (Note [DiLoCo in
// checkpoints]); a checkpoint without DiLoCo leaves DiLoCo as New made
// it.
func (s *session) dilocoResume(c config, rank, world int, params []pg.Tensor) error {
	ck := s.dlResume
	if ck == nil || ck.Extra[dilocoKey+"step"] == nil {
		return nil
	}
	if got := ck.Meta["diloco"]; got != c.dilocoLabel() {
		return usagef("the checkpoint was trained with DiLoCo %s; resume with the same settings, not %s", got,
			c.dilocoLabel())
	}
	mine, ranks := map[string][]float64{}, map[string]bool{}
	for k, v := range ck.Extra {
		if rest, ok := strings.CutPrefix(k, dilocoRankPrefix); ok {
			r, key, _ := strings.Cut(rest, "/")
			ranks[r] = true
			if r == strconv.Itoa(rank) {
				mine[key] = v
			}
		}
	}
	if len(ranks) != world {
		return usagef("the checkpoint holds DiLoCo's state of %d ranks, each with its own parameters and inner "+
			"optimizer; resume it on %d ranks", len(ranks), len(ranks))
	}
	st := diloco.State{Step: int(ck.Extra[dilocoKey+"step"][0]), Pending: make([][]float64, c.fragments)}
	for _, p := range params { // Restore has put the global parameters, the checkpoint's model, in place
		st.Global = append(st.Global, diloco.Widen(p))
	}
	for f := range c.fragments {
		pre := dilocoKey + "outer" + strconv.Itoa(f) + "/"
		o := optim.State{Name: "sgd", Buffers: map[string][]float64{}}
		for k, v := range ck.Extra {
			if key, ok := strings.CutPrefix(k, pre); ok && key != "step" {
				o.Buffers[key] = v
			}
		}
		if v := ck.Extra[pre+"step"]; len(v) == 1 {
			o.Step = int(v[0])
		}
		st.Outer = append(st.Outer, o)
		st.Pending[f] = ck.Extra[dilocoKey+"pending"+strconv.Itoa(f)]
	}
	if err := s.dl.dl.Load(st); err != nil {
		return err
	}
	return s.dilocoLocal(c, mine, params)
}

// dilocoLocal loads this rank's own parameters and inner optimizer state.
func (s *session) dilocoLocal(c config, mine map[string][]float64, params []pg.Tensor) error {
	inner := optim.State{Name: c.optimizer, Buffers: map[string][]float64{}}
	for k, v := range mine {
		if key, ok := strings.CutPrefix(k, "inner/"); ok {
			inner.Buffers[key] = v
		}
	}
	if v := mine["inner_step"]; len(v) == 1 {
		inner.Step = int(v[0])
	}
	for i, p := range params {
		v := mine["param/"+strconv.Itoa(i)]
		if len(v) != p.Len() {
			return usagef("the checkpoint's DiLoCo parameter %d has %d values, the model %d", i, len(v), p.Len())
		}
		diloco.Narrow(p, v)
	}
	return s.opt.Load(inner)
}
