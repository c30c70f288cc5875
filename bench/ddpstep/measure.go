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
	return copyBytes{reducerIn: float64(st.In), reducerOut: float64(st.Out), placed: float64(d.PlacedBytes()), fallbacks: st.Fallbacks}
}

// perStep is (end - start) / steps.
func perStep(end, start copyBytes, steps int) copyBytes {
	n := float64(steps)
	return copyBytes{(end.reducerIn - start.reducerIn) / n, (end.reducerOut - start.reducerOut) / n, (end.placed - start.placed) / n, end.fallbacks - start.fallbacks}
}

// measure builds a plain model and a DDP replica on g and runs them
// alternately, warmup+steps times each: plain step, DDP step, plain step...
// so that drift in the machine's speed moves both alike.
func measure(ctx context.Context, g pg.ProcessGroup, c config) (rankResult, error) {
	var res rankResult
	inner, err := newHook(c)
	if err != nil {
		return res, err
	}
	timer := &commTimer{inner: inner}
	data := makeBatch(c.sizes, c.rows, uint64(100+g.Rank()))

	plain := newModel(c.sizes, c.rows, 1)
	defer plain.close()
	replica := newModel(c.sizes, c.rows, 1)
	defer replica.close()
	d, err := ddp.Wrap(ctx, g, replica.params, reducer.Options{
		Hook: timer, BucketCapBytes: c.bucketCapBytes, FirstBucketBytes: c.firstBucketBytes,
		GradientAsBucketView: c.bucketView,
	})
	if err != nil {
		return res, err
	}
	// --compare-bucket-view: a third model, wrapped with bucket views, run
	// next to the copying replica on the same data.
	var view *model
	var viewTimer *commTimer
	var vc stepClock
	if c.compareView {
		viewInner, err := newHook(c)
		if err != nil {
			return res, err
		}
		viewTimer = &commTimer{inner: viewInner}
		view = newModel(c.sizes, c.rows, 1)
		defer view.close()
		vd, err := ddp.Wrap(ctx, g, view.params, reducer.Options{
			Hook: viewTimer, BucketCapBytes: c.bucketCapBytes, FirstBucketBytes: c.firstBucketBytes,
			GradientAsBucketView: true,
		})
		if err != nil {
			return res, err
		}
		view.backward = func() { vc.bwd = vc.now() }
		if err := view.build(vd); err != nil {
			return res, err
		}
		if err := view.feed(data); err != nil {
			return res, err
		}
	}
	var pc, dc stepClock
	plain.backward = func() { pc.bwd = pc.now() }
	replica.backward = func() { dc.bwd = dc.now() }
	if err := plain.build(nil); err != nil {
		return res, err
	}
	if err := replica.build(d); err != nil {
		return res, err
	}
	if err := plain.feed(data); err != nil {
		return res, err
	}
	if err := replica.feed(data); err != nil {
		return res, err
	}

	var copied0, viewCopied0 copyBytes
	for i := range c.warmup + c.steps {
		if err := align(ctx, g, c.noAlign); err != nil {
			return res, err
		}
		if err := plainStep(plain, &pc); err != nil {
			return res, fmt.Errorf("plain step %d: %w", i, err)
		}
		// The two replicas take turns going first, so neither always runs
		// right after the plain model.
		viewFirst := view != nil && i%2 == 1
		if viewFirst {
			if err := align(ctx, g, c.noAlign); err != nil {
				return res, err
			}
			if _, err := ddpStep(ctx, view, &vc, viewTimer); err != nil {
				return res, fmt.Errorf("DDP step %d with bucket views: %w", i, err)
			}
		}
		if err := align(ctx, g, c.noAlign); err != nil {
			return res, err
		}
		spans, err := ddpStep(ctx, replica, &dc, timer)
		if err != nil {
			return res, fmt.Errorf("DDP step %d: %w", i, err)
		}
		if view != nil && !viewFirst {
			if err := align(ctx, g, c.noAlign); err != nil {
				return res, err
			}
			if _, err := ddpStep(ctx, view, &vc, viewTimer); err != nil {
				return res, fmt.Errorf("DDP step %d with bucket views: %w", i, err)
			}
		}
		if i == c.warmup-1 { // the buckets were rebuilt before step 1
			res.plan = planOf(replica)
			copied0 = copiesOf(replica.ddp)
			if view != nil {
				viewCopied0 = copiesOf(view.ddp)
			}
		}
		if i >= c.warmup {
			s := sampleOf(pc, dc, spans)
			s.viewStep = vc.end
			res.samples = append(res.samples, s)
		}
	}
	res.copied = perStep(copiesOf(replica.ddp), copied0, c.steps)
	if view != nil {
		res.viewCopied = perStep(copiesOf(view.ddp), viewCopied0, c.steps)
	}
	return res, nil
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
		step: dc.end, before: dc.runStart, fwd: dc.bwd - dc.runStart, bwd: dc.runEnd - dc.bwd, wait: dc.reduced - dc.runEnd, after: dc.end - dc.reduced,
		comm: total(comm), hidden: within(comm, span{dc.runStart, dc.runEnd}),
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
