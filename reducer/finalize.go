package reducer

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// Finalize ends the iteration. For a synchronised one it waits for every
// bucket's communication and writes the results into the gradients given
// to MarkReady. Parameters that no rank used keep their gradients
// untouched. It fails, naming the parameters, if some got no gradient.
func (r *Reducer) Finalize(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.usable(); err != nil {
		return err
	}
	if !r.it.active {
		return errors.New("reducer: Finalize without Prepare; call Prepare before each backward pass and Finalize after it")
	}
	r.obs.backwardEnded() // observe.go
	if !r.it.sync {
		r.endLocalIteration()
		r.obs.finish(r, false)
		return nil
	}
	if r.static.first {
		if err := r.launchStaticFirst(ctx); err != nil {
			return r.fail(err)
		}
	}
	if !r.it.markedUnused {
		r.markUnused()
	}
	if !r.t.allLaunched() {
		return r.fail(r.unfinishedError(r.t.missing()))
	}
	if err := r.unlockedWait(func() error { return r.wait(ctx) }); err != nil { // Note [no lock across a wait]
		return r.fail(err)
	}
	globalUsed, err := r.globalUsed(ctx)
	if err != nil {
		return r.fail(err)
	}
	r.recordUnused(globalUsed)
	if err := r.checkDisjoint(); err != nil { // Note [one memory per result]
		return r.fail(err)
	}
	r.writeBack(globalUsed)
	if err := r.deviceWriteBack(ctx, globalUsed); err != nil { // device.go
		return r.fail(err)
	}
	r.accumulate = false
	r.it.active, r.it.ctx = false, nil
	r.it.num++
	r.static.first = false
	r.rebuild.finishRecording()
	r.obs.finish(r, true) // observe.go
	if r.opts.CheckFinite {
		return r.checkFinite() // finite.go
	}
	return nil
}

// Note [no lock across a wait]
//
// Finalize waits for the buckets' Works and the used map's allreduce,
// which take as long as the slowest peer, up to the group timeout when
// one stalls. It waits with r.mu released, so that the read-only methods
// (Buckets, Gradient, CopyStats, GloballyUnused, DeviceBuckets, ...) and
// Fail answer at once meanwhile. While it waits, r.waiting is set and the
// calls that change an iteration (Prepare, MarkReady, Finalize,
// RegisterCommHook, BroadcastParams) are refused rather than interleaved:
// the caller broke the contract that they do not overlap. The wait
// touches nothing the lock guards except what it was handed (the Works,
// which the layout keeps until the next Prepare) and the observer's wait
// stamps, which it collects and records once it holds the lock again. A
// Fail that came in meanwhile wins.

// unlockedWait runs wait with r.mu released: Note [no lock across a wait].
// r.mu must be held; it is held again on return.
func (r *Reducer) unlockedWait(wait func() error) error {
	r.waiting = true
	r.mu.Unlock()
	err := wait()
	r.mu.Lock()
	r.waiting = false
	if r.broken != nil {
		return r.broken // Fail was called meanwhile
	}
	return err
}

// usable reports why an iteration-changing call cannot run now.
func (r *Reducer) usable() error {
	if r.broken != nil {
		return r.broken
	}
	if r.waiting {
		return errors.New("reducer: Finalize is waiting for communication; Prepare, MarkReady and Finalize must not overlap it")
	}
	return nil
}

// endLocalIteration closes a no-sync iteration. The first iteration of an
// accumulation window copied gradients into the buckets; parameters it
// did not reach are zeroed so later iterations can add to them.
func (r *Reducer) endLocalIteration() {
	if !r.accumulate {
		for i := range r.params {
			if !r.t.isReady(i) {
				clear(r.layout.view(i).Data)
			}
		}
	}
	r.accumulate = true
	r.it.active, r.it.ctx = false, nil
}

// wait waits for every bucket in launch order, with r.mu released: it
// reads only what no one changes while r.waiting is set, and collects the
// observer's stamps to record them under the lock.
func (r *Reducer) wait(ctx context.Context) error {
	works := r.layout.works
	stamps := make([]span, len(works))
	defer func() { // under r.mu again, or racing with nothing: see unlockedWait
		r.mu.Lock()
		for b, s := range stamps {
			if s.start != 0 {
				r.obs.waited(b, s)
			}
		}
		r.mu.Unlock()
	}()
	for b, w := range works {
		start := r.obs.waitStart() // observe.go: the clock only
		err := w.Wait(ctx)
		stamps[b] = span{start, r.obs.waitStart()}
		if err != nil {
			if ctx.Err() != nil {
				// The collectives are still running and own the buffers.
				r.g.Abort(err)
			}
			return fmt.Errorf("reducer: communication of bucket %d (parameters %s) failed: %w", b, r.names(r.layout.buckets[b].Params), err)
		}
	}
	return nil
}

// globalUsed returns, with FindUnusedParameters or in the first static
// iteration, which parameters some rank used; otherwise nil (all used).
//
// Note [used map after the buckets]: with FindUnusedParameters the map is
// allreduced only once every bucket's Work is done. A comm hook may still
// issue collectives after Run has returned (PowerSGD sends Q once P is
// summed); a collective of the reducer's own issued in between would sit
// at a different position on each rank. The map is a few bytes, so
// sending it last costs one small collective's latency.
func (r *Reducer) globalUsed(ctx context.Context) ([]int32, error) {
	if r.opts.FindUnusedParameters && !r.opts.StaticGraph {
		r.usedWork = r.g.AllReduce(ctx, r.localUsed, pg.Op(pg.Sum))
	}
	if r.usedWork == nil {
		return nil, nil
	}
	w := r.usedWork
	r.usedWork = nil
	if err := r.unlockedWait(func() error { return w.Wait(ctx) }); err != nil { // Note [no lock across a wait]
		return nil, fmt.Errorf("reducer: allreduce of the used-parameter map failed: %w", err)
	}
	return pg.View[int32](r.localUsed), nil
}

// recordUnused keeps which parameters no rank used, for GloballyUnused.
// globalUsed is nil when the iteration did not allreduce the used map: then
// every parameter was used, or (StaticGraph after its first iteration) the
// first iteration's set still holds.
func (r *Reducer) recordUnused(globalUsed []int32) {
	if globalUsed == nil {
		if !r.opts.StaticGraph {
			r.unusedAll = nil
		}
		return
	}
	r.unusedAll = nil
	for i, n := range globalUsed {
		if n == 0 {
			if r.unusedAll == nil {
				r.unusedAll = make([]bool, len(r.params))
			}
			r.unusedAll[i] = true
		}
	}
}

// writeBack copies each result from its bucket into the gradient it came
// from. Parameters unused on every rank keep their gradient untouched.
func (r *Reducer) writeBack(globalUsed []int32) {
	if r.mixed != nil {
		r.writeBackMixed(globalUsed) // mixed.go
		return
	}
	for i, dst := range r.dst {
		if dst.Data == nil || (globalUsed != nil && globalUsed[i] == 0) {
			continue
		}
		v := r.layout.view(i)
		if sameMemory(dst, v) {
			continue // the gradient is its bucket view: Note [gradient as bucket view]
		}
		r.copies.Out += int64(len(v.Data))
		copy(dst.Data, v.Data)
	}
}

// staticState is StaticGraph's memory of the first iteration.
type staticState struct {
	first      bool   // the first synchronised iteration has not finished
	unused     []bool // after it: parameters that got no gradient locally
	unusedList []int
}

// launchStaticFirst is c10d's delay_all_reduce: the first static
// iteration communicates nothing during backward. At its end the unused
// set is known: those parameters are marked ready with zero gradients and
// every bucket launches, along with the allreduce of the used map.
func (r *Reducer) launchStaticFirst(ctx context.Context) error {
	used := pg.View[int32](r.localUsed)
	r.static.unused = make([]bool, len(r.params))
	r.static.unusedList = nil
	for i, u := range used {
		if u == 0 {
			r.static.unused[i] = true
			r.static.unusedList = append(r.static.unusedList, i)
		}
	}
	if len(r.static.unusedList) > 0 {
		r.log.Warn("parameters are unused during the first iteration; with StaticGraph this set must stay the same on this rank for the whole run",
			zap.Ints("unused", r.static.unusedList))
	}
	r.usedWork = r.g.AllReduce(ctx, r.localUsed, pg.Op(pg.Sum))
	r.t.reset()
	r.it.markedUnused = true
	for i := range r.params {
		if r.static.unused[i] {
			clear(r.layout.view(i).Data)
		}
		from, to, _ := r.t.markReady(i)
		r.launch(from, to)
	}
	return nil
}
