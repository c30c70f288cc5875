package nccl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// watchdog is ProcessGroupNCCL's watchdog thread: it completes Works
// whose events have passed, in stream order, fails the group when a Work
// outlives the group timeout or its ctx, and polls NCCL for asynchronous
// errors (a peer that died, a network failure). On any failure it aborts
// the communicator and fails every pending Work (Group.fail).
func (g *Group) watchdog() {
	defer close(g.exited)
	timer := time.NewTimer(g.opts.AsyncErrorInterval)
	defer timer.Stop()
	lastAsync := time.Now()
	for {
		g.mu.Lock()
		busy := len(g.pending) > 0 && g.failure == nil
		g.mu.Unlock()
		wait := g.opts.AsyncErrorInterval
		if busy {
			wait = g.opts.PollInterval
		}
		timer.Reset(wait)
		select {
		case <-g.stop:
			return
		case <-g.kick:
		case <-timer.C:
		}
		g.poll()
		if time.Since(lastAsync) >= g.opts.AsyncErrorInterval {
			lastAsync = time.Now()
			g.checkAsync()
		}
	}
}

// poll completes the finished Works at the head of the queue and checks
// the deadlines of the rest. It returns when the head is not done.
func (g *Group) poll() {
	for {
		g.mu.Lock()
		if len(g.pending) == 0 || g.failure != nil {
			g.mu.Unlock()
			return
		}
		w := g.pending[0]
		g.mu.Unlock()
		if w.ev == nil { // still being issued
			return
		}
		err := w.ev.Query()
		now := time.Now()
		switch {
		case err == nil:
			g.mu.Lock()
			if len(g.pending) == 0 || g.pending[0] != w {
				g.mu.Unlock() // failed meanwhile
				return
			}
			g.pending = g.pending[1:]
			g.mu.Unlock()
			if w.start != nil && w.startedAt.Load() == 0 { // found started as it is found completed, as torch's update_state
				w.startedAt.Store(now.UnixNano())
			}
			w.finish(g, nil, now, g.lastFinished())
			g.lastFinish.Store(now.UnixNano())
			continue
		case errors.Is(err, libnccl.ErrNotReady):
			if w.start != nil && w.startedAt.Load() == 0 && w.start.Query() == nil {
				w.startedAt.Store(now.UnixNano()) // Note [watchdog times]
			}
			g.checkDeadlines(now)
			return
		default:
			g.fail(pg.ErrComm, fmt.Errorf("%v seq %d: the CUDA stream failed: %w", w.op, w.seq, err), w)
			return
		}
	}
}

// lastFinished is when the watchdog last found an end event passed, or
// zero if it has found none yet.
func (g *Group) lastFinished() time.Time {
	if ns := g.lastFinish.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// checkDeadlines fails the group if a pending Work is past the group
// timeout or its ctx has ended.
func (g *Group) checkDeadlines(now time.Time) {
	if late, cause := g.overdue(now); late != nil {
		g.fail(pg.ErrTimeout, cause, late)
	}
}

// overdue returns the first pending Work past the group timeout or whose
// ctx has ended, and why, or nil.
func (g *Group) overdue(now time.Time) (*work, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, w := range g.pending {
		if now.After(w.deadline) {
			return w, fmt.Errorf("%v seq %d did not finish within the group timeout %v (issued %v ago)",
				w.op, w.seq, g.opts.Timeout, now.Sub(w.issued).Round(time.Millisecond))
		}
		if w.ctx.Err() != nil {
			return w, fmt.Errorf("%v seq %d: its context ended: %w", w.op, w.seq, context.Cause(w.ctx))
		}
	}
	return nil, nil
}

// checkAsync asks NCCL whether the communicator broke asynchronously.
func (g *Group) checkAsync() {
	g.mu.Lock()
	failed := g.failure != nil
	g.mu.Unlock()
	if failed {
		return
	}
	r, err := g.be.AsyncError()
	if err == nil && (r == libnccl.Success || r == libnccl.InProgress) {
		return
	}
	if err == nil {
		err = fmt.Errorf("ncclCommGetAsyncError: %w", r)
		if d := g.be.LastError(); d != "" {
			err = fmt.Errorf("ncclCommGetAsyncError: %w: %s", r, d)
		}
	}
	g.fail(kindOf(err), err, nil)
}

// pollEvent waits for ev, at most until ctx ends.
func pollEvent(ctx context.Context, ev binding.Event) error {
	for {
		err := ev.Query()
		if !errors.Is(err, libnccl.ErrNotReady) {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(DefaultPollInterval):
		}
	}
}
