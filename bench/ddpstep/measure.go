package main

import (
	"context"
	"fmt"
	"time"

	ddp "github.com/goddp/ddp"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// config is what every rank needs to run the same measurement.
type config struct {
	sizes            []int
	rows             int
	steps, warmup    int
	hook             string // one of commhook.Names()
	bucketCapBytes   int
	firstBucketBytes int

	powersgdRank, powersgdStartIter int // the powersgd hooks' options

	bucketView  bool // the DDP replica uses GradientAsBucketView
	compareView bool // also a second replica with GradientAsBucketView, timed alongside
	noAlign     bool // no barrier before each step (see align)
}

// sample is one timed step of each model. The plain fields time the model
// without DDP; the others the DDP replica. Instants are offsets from the
// start of the DDP step.
type sample struct {
	plain, plainFwd, plainBwd, plainAfter time.Duration
	step, before, fwd, bwd, wait, after   time.Duration
	comm, hidden                          time.Duration // union of bucket spans; its part inside RunAll
	buckets                               []bucketSample
	viewStep                              time.Duration // --compare-bucket-view: the step of the replica with bucket views
}

// bucketSample is one bucket's communication in one DDP step.
type bucketSample struct {
	launch, done time.Duration // from the start of backward
	hidden       time.Duration // the part of [launch, done] before RunAll returned
}

// bucketInfo describes one bucket of the plan after the rebuild.
type bucketInfo struct {
	bytes int
	names []string
}

// rankResult is what one rank measured.
type rankResult struct {
	samples []sample
	plan    []bucketInfo
	// Gradient bytes copied per timed step: by the reducer (into and out
	// of the buckets) and by the hooks placing gradients in bucket views.
	copied, viewCopied copyBytes
}

// copyBytes is one replica's gradient copies per step.
type copyBytes struct {
	reducerIn, reducerOut, placed float64
	fallbacks                     int64
}

// copiesOf reads a replica's cumulative copy counters.
func copiesOf(d *ddp.DDP) copyBytes {
	st := d.Reducer().CopyStats()
	return copyBytes{reducerIn: float64(st.In), reducerOut: float64(st.Out), placed: float64(d.PlacedBytes()),
		fallbacks: st.Fallbacks}
}

// perStep is (end - start) / steps.
func perStep(end, start copyBytes, steps int) copyBytes {
	n := float64(steps)
	return copyBytes{(end.reducerIn - start.reducerIn) / n, (end.reducerOut - start.reducerOut) / n,
		(end.placed - start.placed) / n, end.fallbacks - start.fallbacks}
}

// measure builds a plain model and a DDP replica on g and runs them
// alternately, warmup+steps times each: plain step, DDP step, plain step...
// so that drift in the machine's speed moves both alike.
func measure(ctx context.Context, g pg.ProcessGroup, c config) (rankResult, error) {
	t := &trial{g: g, c: c}
	defer t.close()
	if err := t.setup(ctx); err != nil {
		return rankResult{}, err
	}
	return t.alternate(ctx)
}

// trial is one rank's measurement: the plain model, the DDP replica and,
// with --compare-bucket-view, a third model wrapped with bucket views, each
// with the clock its backward hook stamps.
type trial struct {
	g pg.ProcessGroup
	c config

	plain, replica, view *model
	pc, dc, vc           stepClock
	timer, viewTimer     *commTimer
}

// setup builds, wraps and feeds the models; every model has the same
// parameters and the same batch.
func (t *trial) setup(ctx context.Context) error {
	inner, err := newHook(t.c)
	if err != nil {
		return err
	}
	t.timer = &commTimer{inner: inner}
	data := makeBatch(t.c.sizes, t.c.rows, uint64(100+t.g.Rank()))

	t.plain = newModel(t.c.sizes, t.c.rows, 1)
	t.replica = newModel(t.c.sizes, t.c.rows, 1)
	d, err := ddp.Wrap(ctx, t.g, t.replica.params, reducer.Options{
		Hook: t.timer, BucketCapBytes: t.c.bucketCapBytes, FirstBucketBytes: t.c.firstBucketBytes,
		GradientAsBucketView: t.c.bucketView,
	})
	if err != nil {
		return err
	}
	if t.c.compareView {
		if err := t.setupView(ctx, data); err != nil {
			return err
		}
	}
	t.plain.backward = func() { t.pc.bwd = t.pc.now() }
	t.replica.backward = func() { t.dc.bwd = t.dc.now() }
	if err := t.plain.build(nil); err != nil {
		return err
	}
	if err := t.replica.build(d); err != nil {
		return err
	}
	if err := t.plain.feed(data); err != nil {
		return err
	}
	return t.replica.feed(data)
}

// setupView is --compare-bucket-view: a third model, wrapped with bucket
// views, run next to the copying replica on the same data.
func (t *trial) setupView(ctx context.Context, data batch) error {
	viewInner, err := newHook(t.c)
	if err != nil {
		return err
	}
	t.viewTimer = &commTimer{inner: viewInner}
	t.view = newModel(t.c.sizes, t.c.rows, 1)
	vd, err := ddp.Wrap(ctx, t.g, t.view.params, reducer.Options{
		Hook: t.viewTimer, BucketCapBytes: t.c.bucketCapBytes, FirstBucketBytes: t.c.firstBucketBytes,
		GradientAsBucketView: true,
	})
	if err != nil {
		return err
	}
	t.view.backward = func() { t.vc.bwd = t.vc.now() }
	if err := t.view.build(vd); err != nil {
		return err
	}
	return t.view.feed(data)
}

// close closes the models built, the last built first.
func (t *trial) close() {
	for _, m := range []*model{t.view, t.replica, t.plain} {
		if m != nil {
			m.close()
		}
	}
}

// alternate runs the steps, and samples those after the warmup.
func (t *trial) alternate(ctx context.Context) (rankResult, error) {
	var res rankResult
	var copied0, viewCopied0 copyBytes
	for i := range t.c.warmup + t.c.steps {
		spans, err := t.step(ctx, i)
		if err != nil {
			return res, err
		}
		if i == t.c.warmup-1 { // the buckets were rebuilt before step 1
			res.plan = planOf(t.replica)
			copied0 = copiesOf(t.replica.ddp)
			if t.view != nil {
				viewCopied0 = copiesOf(t.view.ddp)
			}
		}
		if i >= t.c.warmup {
			s := sampleOf(t.pc, t.dc, spans)
			s.viewStep = t.vc.end
			res.samples = append(res.samples, s)
		}
	}
	res.copied = perStep(copiesOf(t.replica.ddp), copied0, t.c.steps)
	if t.view != nil {
		res.viewCopied = perStep(copiesOf(t.view.ddp), viewCopied0, t.c.steps)
	}
	return res, nil
}

// step is step i of every model: the plain one, then the two replicas,
// which take turns going first so that neither always runs right after the
// plain model. It returns the DDP replica's bucket spans.
func (t *trial) step(ctx context.Context, i int) ([]span, error) {
	if err := align(ctx, t.g, t.c.noAlign); err != nil {
		return nil, err
	}
	if err := plainStep(t.plain, &t.pc); err != nil {
		return nil, fmt.Errorf("plain step %d: %w", i, err)
	}
	viewFirst := t.view != nil && i%2 == 1
	if viewFirst {
		if err := t.viewStep(ctx, i); err != nil {
			return nil, err
		}
	}
	if err := align(ctx, t.g, t.c.noAlign); err != nil {
		return nil, err
	}
	spans, err := ddpStep(ctx, t.replica, &t.dc, t.timer)
	if err != nil {
		return nil, fmt.Errorf("DDP step %d: %w", i, err)
	}
	if t.view != nil && !viewFirst {
		if err := t.viewStep(ctx, i); err != nil {
			return nil, err
		}
	}
	return spans, nil
}

// viewStep is step i of the replica with bucket views.
func (t *trial) viewStep(ctx context.Context, i int) error {
	if err := align(ctx, t.g, t.c.noAlign); err != nil {
		return err
	}
	if _, err := ddpStep(ctx, t.view, &t.vc, t.viewTimer); err != nil {
		return fmt.Errorf("DDP step %d with bucket views: %w", i, err)
	}
	return nil
}

// align is an untimed barrier before every step, so that each step, plain
// or DDP, starts with the ranks together, as each step of a run of DDP
// steps does (the previous step's last allreduce ended on every rank at
// about the same instant). Without it a DDP step inherits the ranks' drift
// over the unsynchronized plain step before it, and the rank that finished
// that one first waits for the other at the DDP step's last bucket: a cost
// of this benchmark's alternation, not of DDP. --no-align measures with
// that drift.
func align(ctx context.Context, g pg.ProcessGroup, off bool) error {
	if off {
		return nil
	}
	w := g.Barrier(ctx)
	<-w.Done()
	if err := w.Err(); err != nil {
		return fmt.Errorf("barrier before a step: %w", err)
	}
	return nil
}

// plainStep is one step without DDP: RunAll, solver step, Reset.
func plainStep(m *model, clock *stepClock) error {
	clock.start()
	if err := (timedVM{VM: m.vm, clock: clock}).RunAll(); err != nil {
		return err
	}
	err := m.finish()
	clock.end = clock.now()
	return err
}

// ddpStep is one DDP step: RunAll with the hooks launching buckets,
// the wait for them, solver step, Reset. It returns the buckets' spans.
func ddpStep(ctx context.Context, m *model, clock *stepClock, timer *commTimer) ([]span, error) {
	timer.start(clock.start())
	if err := m.ddp.RunAll(ctx, timedVM{VM: m.vm, clock: clock, ended: timer.look}); err != nil {
		return nil, err
	}
	clock.reduced = clock.now()
	err := m.finish()
	clock.end = clock.now()
	return timer.finish(), err
}

func sampleOf(pc, dc stepClock, spans []span) sample {
	comm := union(spans)
	s := sample{
		plain: pc.end, plainFwd: pc.bwd - pc.runStart, plainBwd: pc.runEnd - pc.bwd, plainAfter: pc.end - pc.runEnd,
		step: dc.end, before: dc.runStart, fwd: dc.bwd - dc.runStart, bwd: dc.runEnd - dc.bwd, wait: dc.reduced - dc.runEnd,
		after: dc.end - dc.reduced,
		comm:  total(comm), hidden: within(comm, span{dc.runStart, dc.runEnd}),
	}
	for _, b := range spans {
		s.buckets = append(s.buckets, bucketSample{
			launch: b.from - dc.bwd, done: b.to - dc.bwd,
			hidden: within([]span{b}, span{dc.runStart, dc.runEnd}),
		})
	}
	return s
}

// planOf describes the replica's current buckets.
func planOf(m *model) []bucketInfo {
	var plan []bucketInfo
	for _, b := range m.ddp.Reducer().Buckets() {
		var info bucketInfo
		for _, i := range b {
			p := m.params[i]
			info.bytes += p.Shape().TotalSize() * int(p.Dtype().Size())
			info.names = append(info.names, p.Name())
		}
		plan = append(plan, info)
	}
	return plan
}
