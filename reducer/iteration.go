package reducer

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
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
	if err := pg.CheckContext(ctx); err != nil {
		return fmt.Errorf("reducer: Prepare: %w", err)
	}
	r.mu.Lock()
	acts, err := r.m.begin(it.Sync, it.Unused)
	if err != nil {
		return r.unlockWith(err)
	}
	r.started = true
	clear(r.dst)
	r.iter = iterCtx{ctx: ctx, divisor: r.divisor}
	var buf [2]action // a rebuild and the device twins at most
	todo := append(buf[:0], acts...)
	r.mu.Unlock()
	for _, a := range todo {
		if err := r.perform(a); err != nil {
			return r.fatal(err)
		}
	}
	r.obs.prepare(r, it.Sync) // observe.go
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m.began()
	if r.m.phase == phaseFailed {
		return r.m.err // Fail was called meanwhile
	}
	return nil
}

// MarkReady hands the reducer parameter i's gradient for this iteration.
// It copies the gradient into its bucket (or adds it, while accumulating),
// and launches every bucket that is now complete and next in line. It
// never blocks on communication. grad must stay valid, and untouched by
// anyone else, until Finalize returns: Finalize writes the result into it.
func (r *Reducer) MarkReady(i int, grad pg.Tensor) error {
	r.mu.Lock()
	if err := r.m.accepts(i); err != nil {
		r.mu.Unlock()
		return err
	}
	if err := r.checkGrad(i, grad); err != nil {
		r.mu.Unlock()
		return err
	}
	if err := r.deviceGrad(i, grad); err != nil { // device.go
		r.mu.Unlock()
		return err
	}
	acts, err := r.m.ready(i)
	if err != nil {
		return r.unlockWith(err)
	}
	r.dst[i] = grad
	r.queue = append(r.queue, acts...)
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
			return r.m.fail(err)
		}
	}
	r.draining = false
	return nil
}

func (r *Reducer) performAll(acts []action) error {
	for _, a := range acts {
		if err := r.perform(a); err != nil {
			return err
		}
	}
	return nil
}

// perform carries out one of the machine's actions, without r.mu. The
// machine's phase keeps everything else away from what it touches.
func (r *Reducer) perform(a action) error {
	switch a.kind {
	case actRebuild:
		return r.rebuildBuckets(a.order, a.add) // rebuild.go
	case actDevice:
		return r.prepareDevice(a.add) // device.go
	case actStore:
		return r.store(a.index, a.add)
	case actZero:
		clear(r.layout.view(a.index).Data)
	case actUpload:
		return r.uploadGrad(a.index) // device.go
	case actLaunch:
		r.launch(a.index, a.add)
	case actReduceUsed:
		r.reduceUsedFirst(a.list) // finalize.go
	default:
		return fmt.Errorf("reducer: internal error: action %d has no performer here", a.kind)
	}
	return nil
}

func (r *Reducer) checkGrad(i int, grad pg.Tensor) error {
	if grad.Dtype != r.dtypes[i] || grad.Len() != r.numel[i] || len(grad.Data)%max(grad.Dtype.Size(), 1) != 0 {
		return fmt.Errorf("%w: parameter %d (%s) expects a %v gradient of %d elements (shape %v), got %v with %d elements",
			ErrBadGradient, i, r.params[i].Name, r.dtypes[i], r.numel[i], r.params[i].Shape, grad.Dtype, grad.Len())
	}
	return nil
}

// store puts a gradient into its bucket: a copy, or a sum inside an
// accumulation window (add).
func (r *Reducer) store(i int, add bool) error {
	grad, v := r.dst[i], r.layout.view(i)
	start := r.obs.copyStart() // observe.go
	defer r.obs.copied(i, start)
	if sameMemory(v, grad) { // Note [gradient as bucket view]
		r.copies.inPlace.Add(int64(len(v.Data)))
		return nil
	}
	if r.opts.GradientAsBucketView {
		r.copies.fallbacks.Add(1)
	}
	r.copies.in.Add(int64(len(v.Data)))
	if !add {
		copy(v.Data, grad.Data)
		return nil
	}
	return pg.Add(v, grad)
}

// launch runs the comm hook on bucket b, first checking this rank's
// contribution when check (Note [where the NaN began]). Only the draining
// goroutine, or Finalize, calls it, in the machine's order.
func (r *Reducer) launch(b int, check bool) {
	start := r.obs.launchStart() // observe.go
	var w pg.Work
	if check {
		if err := r.checkBucket(b); err != nil { // origin.go
			w = pg.Completed(fmt.Errorf("reducer: bucket %d: re-sending a non-finite slot as zeros: %w", b, err))
		}
	}
	if w == nil {
		w = r.launchBucket(b, check) // device.go
	}
	r.layout.works[b] = w
	r.obs.launched(b, start, w)
}

// runHook calls the hook, turning a panic into a failed Work: a panic on
// Gorgonia's tape goroutine would kill the process.
func (r *Reducer) runHook(b *commhook.GradBucket) (w pg.Work) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("comm hook panicked", zap.Int("bucket", b.Index), zap.Any("panic", p),
				zap.ByteString("stack", debug.Stack()))
			w = pg.Completed(fmt.Errorf("reducer: comm hook %q panicked on bucket %d: %v", commhook.Name(r.hook), b.Index, p))
		}
	}()
	// join.go: the active ranks, when a Join does not divide by the world size.
	b.Divisor = r.iter.divisor
	w = r.hook.Run(r.iter.ctx, r.obs.hookGroup(r.g), b) // observe.go: with metrics, a group that counts bytes
	if w == nil {
		w = pg.Completed(fmt.Errorf("reducer: comm hook %q returned no Work for bucket %d", commhook.Name(r.hook), b.Index))
	}
	return w
}

// unlockWith releases r.mu and returns err, reporting it first when it is
// the machine's fatal error (logged, counted, the watcher let go).
func (r *Reducer) unlockWith(err error) error {
	fatal := r.m.failed(err)
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
	r.m.fail(err)
	err = r.m.err
	r.iter.ctx = nil
	r.mu.Unlock()
	r.report(err)
	return err
}

func (r *Reducer) report(err error) {
	r.obs.failed(err) // observe.go
	r.log.Error("reducer failed", zap.Error(err))
}
