package reducer

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// Finalize ends the iteration. For a synchronised one it waits for every
// bucket's communication and writes the results into the gradients given
// to MarkReady. Parameters that no rank used keep their gradients
// untouched. It fails, naming the parameters, if some got no gradient.
func (r *Reducer) Finalize(ctx context.Context) error {
	if err := pg.CheckContext(ctx); err != nil {
		return fmt.Errorf("reducer: Finalize: %w", err)
	}
	r.mu.Lock()
	local := r.m.phase == phaseLocal
	acts, err := r.m.finish()
	if err != nil {
		return r.unlockWith(err)
	}
	todo := append(r.finishing[:0], acts...)
	r.finishing = todo
	num := r.m.num
	r.mu.Unlock()
	r.obs.backwardEnded() // observe.go
	var wait, agree action
	for _, a := range todo {
		switch a.kind {
		case actWait:
			wait = a
			continue
		case actAgreeOrigin:
			agree = a // after the wait
			continue
		}
		if err := r.perform(a); err != nil {
			return r.fatal(err)
		}
	}
	if local {
		r.endIteration()
		r.obs.finish(r, false, num) // observe.go
		return nil
	}
	globalUsed, err := r.waitAll(ctx, wait.add) // Note [no lock across a wait]
	if err != nil {
		return r.fatal(err)
	}
	var origin *NonFiniteOriginError
	if agree.kind == actAgreeOrigin {
		if origin, err = r.agreeOrigin(ctx, agree.add); err != nil { // origin.go
			return r.fatal(err)
		}
	}
	return r.finishSync(ctx, globalUsed, origin)
}

// finishSync closes a synchronised iteration whose communication is done:
// the machine records it, the results are written back, and the observer
// and the finiteness check see the result. origin, when some rank's
// gradients held a NaN or an infinity before their collective, is the
// iteration's error (Note [where the NaN began]).
func (r *Reducer) finishSync(ctx context.Context, globalUsed []int32, origin *NonFiniteOriginError) error {
	r.mu.Lock()
	if r.m.phase == phaseFailed {
		err := r.m.err // Fail was called meanwhile
		r.mu.Unlock()
		return err
	}
	acts := r.m.waited(globalUsed)
	writeBack, num, unusedAll := acts[0], r.m.num, r.m.globalUnused
	r.mu.Unlock()
	if err := r.checkDisjoint(); err != nil { // Note [one memory per result]
		return r.fatal(err)
	}
	r.writeBack(globalUsed)
	if err := r.deviceWriteBack(ctx, globalUsed); err != nil { // device.go
		return r.fatal(err)
	}
	if err := r.endIteration(); err != nil {
		return err
	}
	r.obs.finish(r, true, num) // observe.go
	if origin != nil {
		origin.Iteration = num
		return origin
	}
	if writeBack.add {
		return r.checkFinite(num, unusedAll) // finite.go
	}
	return nil
}

// endIteration leaves Finalize's busy phase and drops the iteration's
// context.
func (r *Reducer) endIteration() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m.done()
	r.iter.ctx = nil
	if r.m.phase == phaseFailed {
		return r.m.err
	}
	return nil
}

// Note [no lock across a wait]
//
// Finalize waits for the buckets' Works and the used map's allreduce,
// which take as long as the slowest peer, up to the group timeout when
// one stalls; Prepare's rebuild broadcasts, and the device twins are
// allocated and copied. All of it runs with r.mu released, so that the
// read-only methods (Buckets, Gradient, CopyStats, GloballyUnused,
// DeviceBuckets, ...) and Fail answer at once meanwhile. The machine is
// busy all that time: the calls that change an iteration (Prepare,
// MarkReady, Finalize, RegisterCommHook) are refused rather than
// interleaved, since the caller broke the contract that they do not
// overlap. What the actions touch (the Works, the buckets, the used map,
// the observer's stamps) belongs to the one goroutine performing them
// until the machine leaves busy. A Fail that came in meanwhile wins.

// waitAll waits for every bucket in launch order, then for the used map:
// Note [used map after the buckets].
func (r *Reducer) waitAll(ctx context.Context, reduceUsed bool) ([]int32, error) {
	for b, w := range r.layout.works {
		start := r.obs.waitStart() // observe.go: the clock only
		err := w.Wait(ctx)
		r.obs.waited(b, span{start, r.obs.waitStart()})
		if err != nil {
			if ctx.Err() != nil {
				// The collectives are still running and own the buffers.
				r.g.Abort(err)
			}
			return nil, fmt.Errorf("reducer: communication of bucket %d (parameters %s) failed: %w", b,
				r.names(r.layout.buckets[b].Params), err)
		}
	}
	return r.globalUsed(ctx, reduceUsed)
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
func (r *Reducer) globalUsed(ctx context.Context, reduceNow bool) ([]int32, error) {
	if reduceNow {
		// origin.go: FindNonFiniteOrigin's flag rides on it.
		r.usedWork = r.g.AllReduce(ctx, r.usedMapTensor(), pg.Op(pg.Sum))
	}
	if r.usedWork == nil {
		return nil, nil
	}
	w := r.usedWork
	r.usedWork = nil
	if err := w.Wait(ctx); err != nil {
		return nil, fmt.Errorf("reducer: allreduce of the used-parameter map failed: %w", err)
	}
	if !reduceNow {
		return pg.View[int32](r.usedMap), nil // StaticGraph's first: reduceUsedFirst's
	}
	return r.usedMapResult(), nil
}

// reduceUsedFirst starts the used map's allreduce of StaticGraph's first
// iteration, before its buckets launch (c10d's order there), and warns
// about the unused set the run is now held to.
func (r *Reducer) reduceUsedFirst(unused []int) {
	if len(unused) > 0 {
		r.log.Warn("parameters are unused during the first iteration; with StaticGraph this set must stay the same on this "+
			"rank for the whole run",
			zap.Ints("unused", unused))
	}
	r.usedWork = r.g.AllReduce(r.iter.ctx, r.usedMap, pg.Op(pg.Sum))
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
		r.copies.out.Add(int64(len(v.Data)))
		copy(dst.Data, v.Data)
	}
}
