package tcp

import (
	"context"
	"time"

	"github.com/goddp/ddp/pg"
)

// Note [the caller runs]: through shared memory a small collective takes
// a few microseconds, as long as handing it to the executor goroutine and
// its result back, two wake-ups of goroutines that often sit on parked
// threads. So on a group whose every rank shares memory, a collective
// issued while nothing runs or waits to run is not handed over at once:
// the goroutine that Waits for it runs it (and anything queued before
// it), in issue order, as the executor would have. Nothing else changes:
// the executor still runs whatever a Wait does not claim, within
// lazyGrace of its issue (a timer kicks it), so a Work nobody waits for,
// or one waited for through its Done channel, still runs on its own; one
// goroutine at a time runs collectives (Group.running), so the order
// holds; and a Wait whose ctx is not the collective's own (and can end)
// leaves it to the executor, so that Wait can still return when its ctx
// ends. BenchmarkAllReduce and BenchmarkBarrier count the context
// switches this saves (vcsw/op).

// lazyGrace is how long a collective left for its caller's Wait may sit
// before the executor runs it anyway: long enough for the caller to reach
// Wait, short beside any collective's own duration.
const lazyGrace = 50 * time.Microsecond

// work is the Work of a collective this group issued: its Future, and a
// Wait that runs it on the calling goroutine when it may.
type work struct {
	*pg.Future
	g *Group
	o *op
}

// Wait runs the collective (and those queued before it) on the calling
// goroutine if no goroutine runs collectives now and ctx cannot end
// before the collective's own ctx does, then waits for it.
func (w *work) Wait(ctx context.Context) error {
	if ctx != nil && (ctx == w.o.ctx || ctx.Done() == nil) {
		w.g.runThrough(w.o)
	}
	return w.Future.Wait(ctx)
}

// runThrough runs the queue up to and including o on the calling
// goroutine, unless o was taken already, another goroutine runs
// collectives, or the executor has exited.
func (g *Group) runThrough(o *op) {
	if g.lazy == nil {
		return // the executor was kicked at issue
	}
	g.mu.Lock()
	if o.taken || g.running || g.exited {
		g.mu.Unlock()
		return
	}
	n := 0
	for n < len(g.queue) && g.queue[n] != o {
		n++
	}
	if n == len(g.queue) { // not queued: cannot happen while !o.taken
		g.mu.Unlock()
		return
	}
	batch := make([]*op, n+1)
	copy(batch, g.queue[:n+1])
	clear(g.queue[:n+1])
	g.queue = g.queue[n+1:]
	for _, b := range batch {
		b.taken = true
	}
	g.running = true
	g.armed = false
	g.wg.Add(1) // the executor has not exited, so the count is not 0: Close waits for this too
	g.mu.Unlock()
	g.lazy.Stop()
	defer g.wg.Done()
	for _, b := range batch {
		g.runAndFinish(b)
	}
	g.idle()
}
