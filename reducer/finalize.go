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
			return nil, fmt.Errorf("reducer: communication of bucket %d (parameters %s) failed: %w", b, r.names(r.layout.buckets[b].Params), err)
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
		r.log.Warn("parameters are unused during the first iteration; with StaticGraph this set must stay the same on this rank for the whole run",
			zap.Ints("unused", unused))
	}
	r.usedWork = r.g.AllReduce(r.iter.ctx, r.usedMap, pg.Op(pg.Sum))
}

// writeBackAll writes every result into its gradient (Note [bucket
// transports]), once no two of them share memory.
func (r *Reducer) writeBackAll(ctx context.Context, globalUsed []int32) error {
	if err := r.checkDisjoint(); err != nil { // Note [one memory per result]
		return err
	}
	return r.tr.writeBack(ctx, globalUsed)
}
