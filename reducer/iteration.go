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
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return err
	}
	if r.it.active && r.it.sync {
		if missing := r.t.missing(); len(missing) > 0 {
			return r.fail(r.unfinishedError(missing))
		}
		return r.fail(fmt.Errorf("%w: Finalize was not called after the previous backward; call it after every backward pass", ErrUnfinishedReduction))
	}
	if err := r.checkUnused(it.Unused); err != nil {
		return err
	}
	r.started = true
	if it.Sync {
		if err := r.maybeRebuild(ctx); err != nil {
			return r.fail(err)
		}
		if err := r.prepareDevice(ctx); err != nil { // device.go
			return r.fail(err)
		}
	}
	r.t.reset()
	clear(r.dst)
	if !r.accumulate {
		clear(r.localUsed.Data)
	}
	unused := it.Unused
	if r.opts.StaticGraph {
		unused = r.static.unusedList
	}
	r.it = iteration{active: true, sync: it.Sync, ctx: ctx, unused: unused, num: r.it.num}
	r.obs.prepare(r, it.Sync) // observe.go
	return nil
}

func (r *Reducer) checkUnused(unused []int) error {
	if len(unused) > 0 && !r.opts.FindUnusedParameters && !r.opts.StaticGraph {
		return fmt.Errorf("reducer: %d unused parameters (%s) were given but FindUnusedParameters is off; turn it on, or make every parameter take part in the loss", len(unused), r.names(unused))
	}
	for _, i := range unused {
		if i < 0 || i >= len(r.params) {
			return fmt.Errorf("reducer: unused parameter index %d is out of range [0, %d)", i, len(r.params))
		}
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
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return err
	}
	if !r.it.active {
		return fmt.Errorf("reducer: gradient for parameter %d (%s) arrived outside an iteration; call Prepare before backward", i, r.nameOf(i))
	}
	if err := r.checkGrad(i, grad); err != nil {
		return err
	}
	if r.static.unused != nil && r.static.unused[i] && r.it.sync {
		return r.fail(fmt.Errorf("%w, e.g., one parameter is unused in the first iteration but then got used in the second (parameter %d, %s). This is not compatible with StaticGraph", ErrGraphChanged, i, r.params[i].Name))
	}
	if r.t.isReady(i) {
		return r.fail(r.markedTwiceError(i))
	}
	if err := r.deviceGrad(i, grad); err != nil { // device.go
		return err
	}
	pg.View[int32](r.localUsed)[i] = 1
	r.dst[i] = grad
	copyStart := r.obs.copyStart() // observe.go
	if err := r.store(i, grad); err != nil {
		return r.fail(err)
	}
	r.obs.copied(i, copyStart)
	if !r.it.sync || r.static.first {
		r.t.markOnly(i) // no communication now: see Finalize
		return nil
	}
	if !r.it.markedUnused {
		r.markUnused()
	}
	if r.rebuild.recording {
		r.rebuild.order = append(r.rebuild.order, i)
	}
	if err := r.uploadGrad(i, grad); err != nil { // device.go
		return r.fail(err)
	}
	from, to, _ := r.t.markReady(i)
	r.launch(from, to)
	return nil
}

func (r *Reducer) nameOf(i int) string {
	if i < 0 || i >= len(r.params) {
		return fmt.Sprintf("no such parameter; the model has %d", len(r.params))
	}
	return r.params[i].Name
}

func (r *Reducer) checkGrad(i int, grad pg.Tensor) error {
	if i < 0 || i >= len(r.params) {
		return fmt.Errorf("%w: parameter index %d is out of range [0, %d)", ErrBadGradient, i, len(r.params))
	}
	if grad.Dtype != r.dtypes[i] || grad.Len() != r.numel[i] || len(grad.Data)%max(grad.Dtype.Size(), 1) != 0 {
		return fmt.Errorf("%w: parameter %d (%s) expects a %v gradient of %d elements (shape %v), got %v with %d elements",
			ErrBadGradient, i, r.params[i].Name, r.dtypes[i], r.numel[i], r.params[i].Shape, grad.Dtype, grad.Len())
	}
	return nil
}

// store puts a gradient into its bucket: a copy, or a sum while an
// accumulation window is open.
func (r *Reducer) store(i int, grad pg.Tensor) error {
	v := r.layout.view(i)
	if sameMemory(v, grad) { // Note [gradient as bucket view]
		r.copies.InPlace += int64(len(v.Data))
		return nil
	}
	if r.opts.GradientAsBucketView {
		r.copies.Fallbacks++
	}
	r.copies.In += int64(len(v.Data))
	if !r.accumulate {
		copy(v.Data, grad.Data)
		return nil
	}
	return pg.Add(v, grad)
}

// markUnused marks this iteration's unused parameters ready, with zero
// gradients (or, while accumulating, with what they hold so far).
func (r *Reducer) markUnused() {
	r.it.markedUnused = true
	for _, i := range r.it.unused {
		if r.t.isReady(i) {
			continue // it produced a gradient after all; MarkReady reports that
		}
		if !r.accumulate {
			clear(r.layout.view(i).Data)
		}
		from, to, _ := r.t.markReady(i)
		r.launch(from, to)
	}
}

// launch runs the comm hook on buckets [from, to).
//
// Note [launching under the lock]: c10d holds its one mutex while
// collectives launch, and STYLE.md warns against copying that. Here the
// lock is held across launch on purpose but cheaply: a hook must not
// block (it starts its collectives and returns a Work), so the critical
// section is the bookkeeping plus a few non-blocking calls. Releasing the
// lock between "bucket b is next" and "launch b" would let a misbehaving
// caller interleave two launches and break the in-order guarantee every
// rank relies on (Note [launch order]).
func (r *Reducer) launch(from, to int) {
	for b := from; b < to; b++ {
		start := r.obs.launchStart() // observe.go
		r.layout.works[b] = r.launchBucket(b)
		r.obs.launched(b, start, r.layout.works[b])
	}
}

// runHook calls the hook, turning a panic into a failed Work: a panic on
// Gorgonia's tape goroutine would kill the process.
func (r *Reducer) runHook(b *commhook.GradBucket) (w pg.Work) {
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("comm hook panicked", zap.Int("bucket", b.Index), zap.Any("panic", p), zap.ByteString("stack", debug.Stack()))
			w = pg.Completed(fmt.Errorf("reducer: comm hook %q panicked on bucket %d: %v", commhook.Name(r.hook), b.Index, p))
		}
	}()
	// join.go: the active ranks, when a Join does not divide by the world size.
	b.Divisor = r.divisor
	w = r.hook.Run(r.it.ctx, r.obs.hookGroup(r.g), b) // observe.go: with metrics, a group that counts bytes
	if w == nil {
		w = pg.Completed(fmt.Errorf("reducer: comm hook %q returned no Work for bucket %d", commhook.Name(r.hook), b.Index))
	}
	return w
}

// fail records a fatal error: the ranks are out of step, so every later
// call returns it.
func (r *Reducer) fail(err error) error {
	r.broken = err
	r.it.active = false
	r.it.ctx = nil
	r.obs.failed(err) // observe.go
	r.log.Error("reducer failed", zap.Error(err))
	return err
}

// failLocked is fail for callers that do not hold the lock.
func (r *Reducer) failLocked(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fail(err)
}
