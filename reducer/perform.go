package reducer

// The performers of the machine's actions (Note [events in, actions
// out]), in the order an iteration meets them: perform is the one switch,
// then the store, the launch, the waits and the write back. Each runs with
// r.mu released: Note [no lock across a wait].

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"go.uber.org/zap"
)

func (r *Reducer) performAll(acts []action) error {
	for _, a := range acts {
		if err := r.perform(a); err != nil {
			return err
		}
	}
	return nil
}

// perform carries out one of the machine's actions, without r.mu, every
// kind here. The machine's phase keeps everything else away from what it
// touches.
func (r *Reducer) perform(a action) error {
	var err error
	switch a.kind {
	case actRebuild:
		return r.rebuildBuckets(a.order, a.carry) // rebuild.go
	case actInstallDevice:
		return r.tr.install(a.final) // transport.go
	case actStore:
		return r.store(a.param, a.sum)
	case actZero:
		clear(r.layout.view(a.param).Data)
	case actUpload:
		return r.tr.upload(a.param) // transport.go
	case actLaunch:
		r.launch(a.bucket, a.screen)
	case actReduceUsed:
		r.reduceUsedFirst(a.unused)
	case actWait:
		r.fin.globalUsed, err = r.waitAll(r.fin.ctx, a.reduceUsed) // Note [no lock across a wait]
	case actAgreeOrigin:
		r.fin.origin, err = r.agreeOrigin(r.fin.ctx, a.ownAllreduce) // origin.go
	case actWriteBack:
		err = r.writeBackAll(r.fin.ctx, a.globalUsed)
	case actReportOrigin:
		r.fin.origin.Iteration = a.iteration
		r.fin.verdict = r.fin.origin
	case actCheckFinite:
		r.fin.verdict = r.checkFinite(a.iteration, a.usedByNone) // finite.go
	default:
		return fmt.Errorf("reducer: internal error: action %d has no performer", a.kind)
	}
	return err
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
	return backend.Add(v, grad)
}

// launch runs the comm hook on bucket b, first checking this rank's
// contribution when check (Note [where the NaN began]). Only the draining
// goroutine, or Finalize, calls it, in the machine's order.
func (r *Reducer) launch(b int, check bool) {
	start := r.obs.launchStart() // observe.go
	var w pg.Work
	if check {
		if err := r.checkBucket(b); err != nil {
			w = pg.Completed(fmt.Errorf("reducer: bucket %d: re-sending a non-finite slot as zeros: %w", b, err))
		}
	}
	if w == nil {
		w = r.tr.launch(b, check) // transport.go
	}
	r.layout.works[b] = w
	r.obs.launched(b, start, w)
}

// checkBucket, just before bucket b's hook, zeroes and notes every slot
// of this rank's contribution that holds a NaN or an infinity (Note
// [where the NaN began], origin.go). The transport says which slots the
// host bucket holds, and sends a zeroed one again where its wire copy has
// it already (transport.go).
func (r *Reducer) checkBucket(b int) error {
	bk := r.layout.buckets[b]
	if Finite(bk.Buffer) {
		return nil // the common case: one pass over the bucket
	}
	return r.tr.screen(b, func(j int) bool {
		v := bk.View(j)
		if Finite(v) {
			return false
		}
		clear(v.Data)
		r.origin.note(bk.Params[j])
		return true
	})
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

// writeBackAll writes every result into its gradient (Note [bucket
// transports]), once no two of them share memory.
func (r *Reducer) writeBackAll(ctx context.Context, globalUsed []int32) error {
	if err := r.checkDisjoint(); err != nil { // Note [one memory per result]
		return err
	}
	return r.tr.writeBack(ctx, globalUsed)
}
