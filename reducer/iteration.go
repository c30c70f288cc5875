package reducer

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"go.uber.org/zap"
)

// Iteration says how the coming backward pass is reduced.
type Iteration struct {
	// Sync false skips communication: gradients accumulate locally, and
	// the next iteration with Sync true reduces the sum (DDP's no_sync).
	Sync bool
	// Unused lists the parameters the loss does not reach in this
	// iteration. With FindUnusedParameters they are marked ready when
	// backward starts, so their buckets can complete. Without it, they
	// must be empty. StaticGraph ignores it: the first iteration finds
	// the unused set.
	Unused []int
}

// Prepare starts an iteration. Call it before backward, on every rank.
// Before the first synchronised iteration after the one that recorded the
// gradient-ready order, it rebuilds the buckets in that order, which is a
// collective.
func (r *Reducer) Prepare(ctx context.Context, it Iteration) error {
	if err := backend.CheckContext(ctx); err != nil {
		return fmt.Errorf("reducer: Prepare: %w", err)
	}
	r.mu.Lock()
	todo, err := r.m.step(evBegin{sync: it.Sync, unused: it.Unused}, r.preparing[:0])
	if err != nil {
		return r.unlockWith(err)
	}
	r.preparing = todo // Prepare's own; busy keeps every other caller away from it
	r.started = true
	clear(r.dst)
	r.iter = iterCtx{ctx: ctx, divisor: r.divisor}
	r.mu.Unlock()
	if err := r.performAll(todo); err != nil {
		return r.fatal(err)
	}
	r.obs.prepare(r, it.Sync) // observe.go
	r.mu.Lock()
	defer r.mu.Unlock()
	// An error here is a Fail that came in meanwhile. The transport is the
	// driver's, and busy kept every other caller away from it.
	_, err = r.m.step(evBegan{hostOnly: r.tr.hostOnly()}, nil)
	return err
}

// MarkReady hands the reducer parameter i's gradient for this iteration.
// It copies the gradient into its bucket (or adds it, while accumulating),
// and launches every bucket that is now complete and next in line. It
// never blocks on communication. grad must stay valid, and untouched by
// anyone else, until Finalize returns: Finalize writes the result into it.
func (r *Reducer) MarkReady(i int, grad pg.Tensor) error {
	r.mu.Lock()
	settled := r.m.status().phase == phaseFailed // its error was reported when it failed
	queue, err := r.m.step(evReady{param: i, grad: grad}, r.queue)
	if err != nil {
		if settled {
			r.mu.Unlock()
			return err
		}
		return r.unlockWith(err)
	}
	r.dst[i] = grad
	r.queue = queue
	return r.unlockWith(r.drain())
}

// drain performs the queued actions in order, with r.mu released while
// they run. One goroutine drains at a time: a MarkReady that finds another
// draining leaves its actions to it, so actions run in the order the
// machine gave them, and buckets launch in index order on every rank
// (Note [launch order]), without a lock held across a comm hook. r.mu is
// held on entry and on return.
func (r *Reducer) drain() error {
	if r.draining {
		return nil
	}
	r.draining = true
	for len(r.queue) > 0 {
		batch := r.queue
		r.queue = r.spare[:0]
		r.mu.Unlock()
		err := r.performAll(batch)
		r.mu.Lock()
		r.spare = batch[:0]
		if err != nil {
			r.queue = r.queue[:0]
			r.draining = false
			_, _ = r.m.step(evFail{err: err}, nil) // a Fail that came in meanwhile stays the fatal one
			return err
		}
	}
	r.draining = false
	return nil
}

// Finalize ends the iteration. For a synchronised one it waits for every
// bucket's communication and writes the results into the gradients given
// to MarkReady. Parameters that no rank used keep their gradients
// untouched. It fails, naming the parameters, if some got no gradient.
func (r *Reducer) Finalize(ctx context.Context) error {
	if err := backend.CheckContext(ctx); err != nil {
		return fmt.Errorf("reducer: Finalize: %w", err)
	}
	r.mu.Lock()
	todo, err := r.m.step(evFinish{}, r.finishing[:0])
	if err != nil {
		return r.unlockWith(err)
	}
	r.finishing = todo // Finalize's own; busy keeps every other caller away from it
	st := r.m.status()
	r.mu.Unlock()
	r.obs.backwardEnded() // observe.go
	r.fin = finishState{ctx: ctx}
	if err := r.performAll(todo); err != nil {
		return r.fatal(err)
	}
	if st.phase != phaseBusy { // a no-sync iteration ends at once
		_, _ = r.endIteration(todo[:0])       // a Fail meanwhile is the next call's error
		r.obs.finish(r, false, st.iterations) // observe.go
		return nil
	}
	return r.finishSync()
}

// finishState is what Finalize's actions hand to each other: the wait's
// used map and the origin of a NaN, then the iteration's verdict.
type finishState struct {
	ctx        context.Context // Finalize's, for the waits
	globalUsed []int32
	origin     *NonFiniteOriginError
	verdict    error // not fatal: a NonFiniteOriginError or a NonFiniteError
}

// finishSync closes a synchronised iteration whose communication is done:
// the machine records it, the results are written back, the observer sees
// the iteration, and then what it reports (Note [where the NaN began],
// CheckFinite) becomes Finalize's error.
func (r *Reducer) finishSync() error {
	r.mu.Lock()
	todo, err := r.m.step(evWaited{globalUsed: r.fin.globalUsed, origin: r.fin.origin != nil}, r.finishing[:0])
	r.mu.Unlock()
	if err != nil {
		return err // Fail was called meanwhile
	}
	if err := r.performAll(todo); err != nil {
		return r.fatal(err)
	}
	todo, err = r.endIteration(todo[:0])
	if err != nil {
		return err
	}
	r.mu.Lock()
	num := r.m.status().iterations
	r.mu.Unlock()
	r.obs.finish(r, true, num) // observe.go
	if err := r.performAll(todo); err != nil {
		return r.fatal(err)
	}
	verdict := r.fin.verdict
	r.fin = finishState{}
	return verdict
}

// endIteration leaves Finalize's busy phase and drops the iteration's
// context; the actions are what the iteration reports.
func (r *Reducer) endIteration(dst []action) ([]action, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.iter.ctx = nil
	return r.m.step(evDone{}, dst)
}

// unlockWith releases r.mu and returns err, reporting it first when it is
// the machine's fatal error (logged, counted, the watcher let go).
func (r *Reducer) unlockWith(err error) error {
	fatal := r.m.status().fatal(err)
	if fatal {
		r.iter.ctx = nil
	}
	r.mu.Unlock()
	if fatal {
		r.report(err)
	}
	return err
}

// fatal fails the reducer from outside the lock: the ranks are out of
// step, so every later call returns the first fatal error, which fatal
// returns (a Fail that came in meanwhile wins).
func (r *Reducer) fatal(err error) error {
	r.mu.Lock()
	_, err = r.m.step(evFail{err: err}, nil)
	r.iter.ctx = nil
	r.mu.Unlock()
	r.report(err)
	return err
}

func (r *Reducer) report(err error) {
	r.obs.failed(err) // observe.go
	r.log.Error("reducer failed", zap.Error(err))
}
