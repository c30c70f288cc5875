package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	G "gorgonia.org/gorgonia"
)

// span is an interval of one step, as offsets from the step's start.
type span struct{ from, to time.Duration }

func (s span) len() time.Duration { return max(0, s.to-s.from) }

// union merges spans into disjoint spans, sorted.
func union(spans []span) []span {
	s := slices.Clone(spans)
	slices.SortFunc(s, func(a, b span) int { return int(a.from - b.from) })
	var out []span
	for _, x := range s {
		if n := len(out); n > 0 && x.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, x.to)
			continue
		}
		out = append(out, x)
	}
	return out
}

// total is the summed length of disjoint spans.
func total(disjoint []span) time.Duration {
	var d time.Duration
	for _, s := range disjoint {
		d += s.len()
	}
	return d
}

// within is how much of the disjoint spans lies inside w.
func within(disjoint []span, w span) time.Duration {
	var d time.Duration
	for _, s := range disjoint {
		d += span{max(s.from, w.from), min(s.to, w.to)}.len()
	}
	return d
}

// commTimer is a comm hook that times another: per bucket, when the hook
// was called (launch) and when its Work finished (done).
//
// Note [observing done]: nothing tells us the instant a backend completes
// a Work; we only see it finished when some goroutine looks. On a busy
// machine a goroutine woken by the Done channel can run a millisecond or
// two late. So done is the earliest of several looks, each of which can
// only be late, never early: right after the hook returns (a Work that
// finished at once, like commhook.Noop's), a goroutine blocked on Done,
// every later hook call, the tape's end, and the reducer's Wait in
// Finalize.
type commTimer struct {
	inner   commhook.Hook
	origin  time.Time // the current step's start
	mu      sync.Mutex
	works   []pg.Work // per bucket index
	spans   []span    // per bucket index; to is 0 until seen done
	pending sync.WaitGroup
}

func (c *commTimer) Name() string { return "timed-" + commhook.Name(c.inner) }

// Run calls the inner hook on the tape's goroutine, as the reducer does.
func (c *commTimer) Run(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
	launch := time.Since(c.origin)
	w := c.inner.Run(ctx, g, b)
	c.launched(b.Index, launch, w)
	c.look()
	c.pending.Add(1)
	go func() {
		defer c.pending.Done()
		<-w.Done()
		c.look()
	}()
	return timedWork{Work: w, timer: c}
}

func (c *commTimer) launched(bucket int, at time.Duration, w pg.Work) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.spans) <= bucket {
		c.spans = append(c.spans, span{})
		c.works = append(c.works, nil)
	}
	c.spans[bucket] = span{from: at}
	c.works[bucket] = w
}

// look records now as the done instant of every finished Work not yet
// seen finished.
func (c *commTimer) look() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Since(c.origin)
	for i, w := range c.works {
		if w == nil || c.spans[i].to != 0 {
			continue
		}
		select {
		case <-w.Done():
			c.spans[i].to = now
		default:
		}
	}
}

// start begins a step at origin. Call it before the step's backward.
func (c *commTimer) start(origin time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.origin = origin
	c.spans, c.works = c.spans[:0], c.works[:0]
}

// finish waits for the step's observers and returns its spans.
func (c *commTimer) finish() []span {
	c.pending.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans)
}

// timedWork is the Work the reducer gets: its Wait is one more look.
type timedWork struct {
	pg.Work
	timer *commTimer
}

func (w timedWork) Wait(ctx context.Context) error {
	err := w.Work.Wait(ctx)
	w.timer.look()
	return err
}

// stepClock collects one step's instants as offsets from its start.
type stepClock struct {
	origin                time.Time
	runStart, bwd, runEnd time.Duration
	reduced, end          time.Duration
}

func (c *stepClock) start() time.Time {
	*c = stepClock{origin: time.Now()}
	return c.origin
}

func (c *stepClock) now() time.Duration { return time.Since(c.origin) }

// timedVM is a VM whose RunAll records when the tape starts and ends,
// and calls ended, if set, when it has ended.
type timedVM struct {
	G.VM
	clock *stepClock
	ended func()
}

func (v timedVM) RunAll() error {
	v.clock.runStart = v.clock.now()
	err := v.VM.RunAll()
	v.clock.runEnd = v.clock.now()
	if v.ended != nil {
		v.ended()
	}
	return err
}
