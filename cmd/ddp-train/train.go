package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	ddp "github.com/goddp/ddp"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"github.com/goddp/ddp/sampler"
	"github.com/goddp/ddp/timeline"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// trainer runs the training loop of one rank.
type trainer struct {
	c       config
	g       pg.ProcessGroup
	ds      *dataset.Dataset
	log     *zap.Logger
	out     io.Writer // rank 0's progress; io.Discard elsewhere
	stderr  io.Writer
	metrics *trainingMetrics      // nil: no metrics
	reg     prometheus.Registerer // the reducer's metrics; nil: none
	buildMu *sync.Mutex           // held while building Gorgonia graphs
	dataSum string                // dataDigest of ds, computed once: runMeta
	dbg     *debugState           // /debug/state and the failure report; nil: none (debug.go)
}

// specFor is the model spec of c for a data set of info.
func specFor(c config, info dataset.Info) model.Spec {
	dt := tensor.Float32
	if c.dtype == "float64" {
		dt = tensor.Float64
	}
	return model.Spec{Kind: c.model, InputShape: info.Shape, Hidden: c.hidden, Activation: c.activation,
		Classes: info.Classes, Dtype: dt, Batch: c.batchSize}
}

// checkInit fails early, with exit code 2, on a model spec, --init
// directory or --eval-data set that does not fit the data.
func checkInit(c config, info dataset.Info) error {
	p, err := model.NewParams(specFor(c, info), uint64(c.seed))
	if err != nil {
		return err
	}
	if c.initDir != "" {
		if err := loadInit(p, c); err != nil { // evalcmd.go
			return err
		}
	}
	return checkEvalData(c, info) // eval.go
}

// session is what one rank builds before the first step.
type session struct {
	spec   model.Spec
	params *model.Params
	eng    stepEngine // the engine's forward, backward and reducer (Note [engines])
	ddp    *ddp.DDP   // --engine gorgonia's reducer and hooks; nil with --engine gomlx
	net    *model.Net
	vm     gorgonia.VM
	ft     *ftState // --fault-tolerant: the state a healing peer receives (ftworker.go)
	opt    optim.Optimizer
	smp    *sampler.Sampler
	hook   commhook.Hook    // --comm-hook's, with this rank's state
	start  int              // the first step to run (after a resume)
	tl     *timeline.Writer // --timeline; nil without
	strag  *stragglers      // who arrives last; made by agreeStop
	eval   *evaluator       // the held-out set's scorer; nil without one (eval.go)
	// --zero-overlap: the hook that steps each bucket, and its broadcast
	// group (zerooverlap.go); nil without
	zh        *optim.ZeroHook
	zeroBcast pg.ProcessGroup
	dl        *dilocoRun             // --diloco-sync-every (diloco.go); nil without
	dlResume  *checkpoint.Checkpoint // the checkpoint resumed from, for DiLoCo's part of it

	schedRun // the learning-rate schedule (optflags.go)
}

// close releases what the session holds beyond the run: the reducer's
// device buckets, and a comm hook's own groups (hierarchical's subgroups),
// which say goodbye to their peers rather than vanish.
func (s *session) close(log *zap.Logger) {
	if err := s.eng.Close(); err != nil {
		log.Warn("releasing the reducer", zap.Error(err))
	}
	if c, ok := s.hook.(io.Closer); ok {
		if err := c.Close(); err != nil {
			log.Warn("closing the comm hook", zap.Error(err))
		}
	}
	if s.zeroBcast != nil {
		if err := s.zeroBcast.Close(); err != nil {
			log.Warn("closing --zero-overlap's broadcast group", zap.Error(err))
		}
	}
	if s.dl != nil && s.dl.group != nil {
		if err := s.dl.group.Close(); err != nil {
			log.Warn("closing DiLoCo's group", zap.Error(err))
		}
	}
}

// buildGorgonia is --engine gorgonia's part of build: the reducer and its
// hooks, the model's graph and the tape machine.
func (t *trainer) buildGorgonia(ctx context.Context, s *session, opts reducer.Options) error {
	var err error
	if s.ddp, err = ddp.Wrap(ctx, t.g, s.params.Nodes, opts); err != nil {
		return err
	}
	runtime.GC() // Note [the broadcast's copy] (memory.go)
	t.buildMu.Lock()
	defer t.buildMu.Unlock()
	s.net, err = s.params.Forward(s.spec, s.ddp.Node)
	if err == nil {
		_, err = s.ddp.Grad(s.net.Loss)
	}
	if err != nil {
		return err
	}
	s.vm = gorgonia.NewTapeMachine(s.params.Graph)
	s.eng = &gorgoniaEngine{DDP: s.ddp, net: s.net, vm: s.vm, spec: s.spec}
	return nil
}

func (t *trainer) build(ctx context.Context) (*session, error) {
	s := &session{spec: specFor(t.c, t.ds.Info())}
	t.buildMu.Lock()
	p, err := model.NewParams(s.spec, uint64(t.c.seed))
	if err == nil && t.c.initDir != "" {
		err = loadInit(p, t.c) // evalcmd.go
	}
	t.buildMu.Unlock()
	if err != nil {
		return nil, err
	}
	s.params = p
	if s.tl, err = t.openTimeline(); err != nil {
		return nil, err
	}
	hook, err := t.hookAndOptimizer(ctx, s)
	if err != nil {
		return nil, err
	}
	opts := reducer.Options{
		BucketCapBytes:       int(t.c.bucketCapMB * (1 << 20)),
		FirstBucketBytes:     int(t.c.firstBucketMB * (1 << 20)),
		FindUnusedParameters: t.c.findUnused,
		// Note [non-finite guard]; with --zero-overlap the buckets hold the new
		// parameters after the iteration, and the hook checks the averages
		// itself (optim.ZeroHook)
		CheckFinite:          t.c.zeroOverlap == "off",
		FindNonFiniteOrigin:  t.c.findOrigin,
		StaticGraph:          t.c.staticGraph,
		GradientAsBucketView: t.c.bucketView,
		Hook:                 hook,
		Logger:               t.log,
		Registerer:           t.reg,
		Timeline:             s.tl,
	}
	if t.c.engine == "gomlx" {
		s.eng, err = t.newGoMLXEngine(ctx, s, opts) // gomlxengine.go
	} else {
		err = t.buildGorgonia(ctx, s, opts)
	}
	if err != nil {
		return nil, err
	}
	if t.c.resume {
		// Every rank loads the same checkpoint, so the values set after
		// Wrap's broadcast are the same everywhere.
		if err := t.resumeSession(ctx, s); err != nil {
			return nil, err
		}
	}
	if err := s.newDiLoCo(ctx, t.c, t.g); err != nil { // diloco.go
		return nil, err
	}
	if s.smp, err = sampler.New(t.ds.N, t.g.Size(), t.g.Rank(), t.c.shuffle, t.c.seed); err != nil {
		return nil, err
	}
	s.eval, err = t.newEvaluator(s) // eval.go
	return s, err
}

// hookAndOptimizer makes the session's comm hook and optimizer, and
// returns the hook the reducer runs: --comm-hook's, noop under DiLoCo's
// inner steps, or wrapped by --zero-overlap.
func (t *trainer) hookAndOptimizer(ctx context.Context, s *session) (commhook.Hook, error) {
	hook, err := hookByName(t.c) // hooks.go
	if err != nil {
		return nil, usageError{err}
	}
	if t.c.syncEvery > 0 {
		hook = commhook.Noop{} // DiLoCo's inner steps: each rank's own gradients (diloco.go)
	}
	s.hook = hook
	// Every parameter, used or not: DDP steps each with its average over
	// ranks (ddp: Note [every parameter is stepped]).
	sizes := make([]int, len(s.params.Nodes))
	for i, n := range s.params.Nodes {
		sizes[i] = n.Shape().TotalSize()
	}
	if s.opt, err = t.c.newOptimizer(t.g, sizes); err != nil { // optflags.go
		return nil, err
	}
	return s.zeroHook(ctx, t.c, t.g, hook) // zerooverlap.go: --zero-overlap
}

// resumeSession loads the newest checkpoint into s's parameters, optimizer
// and comm hook, and refuses one that does not match this run or holds a
// non-finite parameter. Without one yet, the run starts from step 0.
func (t *trainer) resumeSession(ctx context.Context, s *session) error {
	ck, err := t.loadCheckpoint(ctx) // ckpt.go
	if err == nil && ck == nil {
		return nil // Note [checkpoint directories are owned]
	}
	if err == nil {
		err = t.checkResume(ck.Meta) // outputs.go: Note [resume that cannot lie]
	}
	if err == nil {
		err = checkCard(ck, s.spec, t.c.modelMayChange()) // card.go
	}
	if err == nil {
		err = ck.Restore(s.params, s.opt)
	}
	if err == nil {
		err = restoreHookState(ck, t.g.Rank(), t.g.Size(), s.hook, hookLabel(t.c)) // hooks.go
	}
	if err == nil {
		if name, ferr := s.paramsFinite(); ferr != nil || name != "" {
			err = ferr
			if name != "" {
				err = usagef("the checkpoint's parameter %s holds a NaN or an infinity; resume from an earlier checkpoint "+
					"(--checkpoint-keep) or start again", name)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("resuming from %s: %w", t.c.checkpointDir, err)
	}
	s.start, s.dlResume = ck.Step, ck
	s.schedState, s.schedName, s.schedSteps, s.schedLR = ck.Extra[scheduleStateKey], ck.Meta[scheduleStateKey],
		ck.Meta[scheduleStepsKey], ck.Meta["lr"]
	t.log.Info("resuming", zap.Int("rank", t.g.Rank()), zap.Int("step", ck.Step),
		zap.String("checkpoint", t.c.checkpointDir))
	return nil
}

// totalSteps is --steps, or the optimizer steps in --epochs epochs.
func (t *trainer) totalSteps(s *session) int {
	if t.c.steps > 0 {
		return t.c.steps
	}
	micro := t.c.epochs * sampler.StepsPerEpoch(s.smp.NumSamples(), t.c.batchSize)
	return (micro + t.c.gradAccum - 1) / t.c.gradAccum
}

func (t *trainer) run(ctx context.Context) error {
	s, err := t.build(ctx)
	if err != nil {
		return err
	}
	if s.vm != nil {
		defer s.vm.Close()
	}
	defer s.closeTimeline(t.log)
	defer s.close(t.log)
	defer s.eval.close()
	if t.c.evalOnly { // `ddp-train eval` (evalcmd.go)
		return t.scoreOnly(ctx, s)
	}
	total := t.totalSteps(s)
	s.total = total
	if err := s.newSchedule(t.c, total); err != nil { // optflags.go
		return err
	}
	if s.start >= total && t.g.Rank() == 0 { // Note [resume that cannot lie]
		t.log.Info("nothing to train: the checkpoint is already at the last step; writing the outputs",
			zap.Int("checkpoint_step", s.start), zap.Int("steps", total))
	}
	t.announceCheckpoint(s, total)
	t.dbg.attach(s.eng.Reducer(), total)
	prog := newProgress(t, s.start, total)
	feed := newFeeder(t.ds, s.smp, t.c.batchSize)
	began := time.Now()
	t.c.intr.arm() // a signal now stops after the current step (elastic.go)
	for step := s.start; step < total; step++ {
		t.dbg.at(step + 1)
		st, err := t.step(ctx, s, feed, step)
		var div *divergedError
		if errors.As(err, &div) {
			return err // it names the step
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", step+1, err)
		}
		if err := prog.add(ctx, step+1, st); err != nil {
			return err
		}
		check := t.c.checkReplicas > 0 && (step+1)%t.c.checkReplicas == 0
		// Every rank the same: Note [preemption], Note [non-finite guard].
		sig, lossBad, err := t.agreeStop(ctx, s, check, !st.lossOK, st.comm)
		if err != nil {
			return fmt.Errorf("step %d: %w", step+1, err)
		}
		if lossBad {
			if t.c.onNonFinite != "skip" {
				return t.diverged(ctx, step+1, !st.lossOK, "")
			}
			t.log.Warn("a loss was not finite, but the averaged gradients were, so the step was applied",
				zap.Int("rank", t.g.Rank()), zap.Int("step", step+1))
		}
		saved := t.c.checkpointEvery > 0 && (step+1)%t.c.checkpointEvery == 0
		if saved {
			if err := t.saveCheckpoint(ctx, s, step+1); err != nil {
				return err
			}
		}
		if err := t.evalAt(ctx, s, prog, step+1, total, sig != 0); err != nil { // eval.go
			return err
		}
		if sig != 0 && step+1 < total {
			prog.end() // the bar's line
			return t.stopAt(ctx, s, step+1, sig, saved)
		}
	}
	return t.end(ctx, s, prog, total, began)
}

// end finishes a run that reached its last step: the last figures, the
// non-finite guard on the parameters, the final checkpoint and
// evaluation, and the outputs.
func (t *trainer) end(ctx context.Context, s *session, prog *progress, total int, began time.Time) error {
	final, err := prog.finish(ctx)
	if err != nil {
		return err
	}
	if err := s.dilocoFinish(ctx, t.metrics); err != nil { // diloco.go: the global parameters are the model
		return err
	}
	if name, err := s.paramsFinite(); err != nil || name != "" {
		if err != nil {
			return err
		}
		return t.diverged(ctx, total, false, fmt.Sprintf("the parameter %s holds a NaN or an infinity", name))
	}
	if t.finalCheckpoint(s, total) {
		if err := t.saveCheckpoint(ctx, s, total); err != nil {
			return err
		}
	}
	ev, err := t.finalEval(ctx, s, prog, total) // eval.go
	if err != nil {
		return err
	}
	t.log.Info("done", zap.Int("rank", t.g.Rank()), zap.Int("steps", total), zap.Int("skipped_steps", prog.skipped),
		zap.String("engine", t.c.engine),
		zap.String("param_digest", digest(s.params)))
	sum := summaryOf(t, final, max(total-s.start, 0), time.Since(began))
	sum.OptimizerStateBytes, sum.Zero, sum.ZeroOverlap = optim.StateBytes(s.opt), t.c.zero, t.c.zeroOverlap
	sum.SkippedSteps = prog.skipped
	sum.setDiLoCo(s.dl) // diloco.go
	sum.setEval(ev)
	return t.writeOutputs(s, sum) // outputs.go: Note [outputs only on success]
}

// finalCheckpoint reports whether the run ends with a checkpoint of its
// last step: --checkpoint without --checkpoint-every, when there was a
// step to train (Note [no flag is ignored]). A signal's stop writes one
// either way (stopAt).
func (t *trainer) finalCheckpoint(s *session, total int) bool {
	return t.c.checkpointDir != "" && t.c.checkpointEvery == 0 && total > s.start
}

// announceCheckpoint says, once (rank 0), when --checkpoint without
// --checkpoint-every writes.
func (t *trainer) announceCheckpoint(s *session, total int) {
	if t.finalCheckpoint(s, total) && t.g.Rank() == 0 {
		t.log.Info("--checkpoint without --checkpoint-every: one checkpoint, written at the end of the run, or at the step "+
			"where a signal stops it",
			zap.String("checkpoint", t.c.checkpointDir), zap.Int("final_step", total))
	}
}

// stats are one step's local numbers.
type stats struct {
	loss    float64 // mean over the micro-batches
	correct int
	samples int
	compute time.Duration // forward and backward
	comm    time.Duration // communication left after backward
	steps   int           // optimizer steps summed (for a window)
	skipped int           // steps whose update was skipped (--on-nonfinite skip)
	lossOK  bool          // every micro-batch's loss on this rank was finite
	lr      float64       // the learning rate of the step (the last one, for a window)
}

// step runs one optimizer step: gradAccum micro-batches, communicating on
// the last, then the update.
func (t *trainer) step(ctx context.Context, s *session, feed *feeder, step int) (stats, error) {
	st := stats{lossOK: true}
	k := t.c.gradAccum
	for micro := range k {
		m := step*k + micro
		x, labels := feed.gather(m)
		start := time.Now()
		sync := micro == k-1
		var out microOut
		var err error
		if sync {
			err = s.beginZero(k) // zerooverlap.go: --zero-overlap
		}
		if err == nil {
			out, err = s.eng.micro(ctx, x, labels, m, sync)
		}
		if err != nil && s.zh != nil {
			s.zh.Abandon() // a failed overlapped step copies nothing
		}
		what, nonFinite := nonFiniteGrads(err) // Note [non-finite guard]
		if err != nil && !nonFinite {
			return st, err
		}
		st.compute += out.tapeEnd.Sub(start)
		st.comm += time.Since(out.tapeEnd)
		st.lossOK = st.lossOK && finiteLoss(out.loss)
		if nonFinite {
			if t.c.onNonFinite != "skip" {
				return st, t.diverged(ctx, step+1, !st.lossOK, what)
			}
			if t.g.Rank() == 0 {
				t.log.Warn("skipping the update: the gradients are not finite (--on-nonfinite skip)", zap.Int("step", step+1),
					zap.String("cause", what))
			}
			st.correct += out.correct
			s.eng.reset()
			lr := s.sched.LR()
			s.sched.Step() // a skipped update still counts among the S steps the schedule spans
			return stats{skipped: 1, lossOK: true, samples: st.samples + len(labels), correct: st.correct, compute: st.compute,
				comm: st.comm, lr: lr}, nil
		}
		st.loss += out.loss / float64(k)
		st.correct += out.correct
		st.samples += len(labels)
		if !sync {
			s.eng.reset()
		}
	}
	if s.zh != nil { // the buckets have stepped and broadcast the parameters
		st.lr = s.sched.LR()
		err := s.finishZero()
		t.metrics.observeOptState(optim.StateBytes(s.opt))
		s.eng.reset()
		return st, err
	}
	params, grads, err := s.eng.StepTensors()
	if err != nil {
		return st, err
	}
	if k > 1 { // the mean over micro-batches, as a loss divided by k would give
		for _, g := range grads {
			if err := commhook.Divide(g, k); err != nil {
				return st, err
			}
		}
	}
	st.lr = s.sched.LR()
	if err := s.update(ctx, t.c, params, grads); err != nil { // optflags.go: clipping, the schedule, the step
		return st, err
	}
	if err := s.dilocoStep(ctx, params, t.metrics); err != nil { // diloco.go
		return st, err
	}
	t.metrics.observeOptState(optim.StateBytes(s.opt))
	s.eng.reset()
	return st, nil
}

// timedVM records when the tape finished, before DDP waits for buckets.
type timedVM struct {
	gorgonia.VM
	tapeEnd time.Time
}

func (v *timedVM) RunAll() error {
	err := v.VM.RunAll()
	v.tapeEnd = time.Now()
	return err
}

// digest is a hash of every parameter's bytes: equal digests on every
// rank mean bitwise-identical replicas.
func digest(p *model.Params) string {
	h := sha256.New()
	for _, n := range p.Nodes {
		if t, err := gtensor.TensorOf(n.Value()); err == nil {
			h.Write(t.Data)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
