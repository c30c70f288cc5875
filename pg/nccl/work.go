package nccl

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// work is one issued Work: its Future, what the flight recorder and the
// hooks report, the event that marks its end on the stream, and what to
// do on the host once the event has passed.
type work struct {
	fut               *pg.Future
	op                pg.OpType
	seq               uint64
	peer              int // pg.NoPeer, or the peer of a Send or Recv
	dtype             pg.Dtype
	inBytes, outBytes int64
	issued            time.Time
	deadline          time.Time
	ctx               context.Context // the caller's; ending it fails the Work and aborts the group

	ev binding.Event
	// start and stop are timing events around the NCCL calls
	// (Options.EnableTiming), and startedAt (ns) when the watchdog found
	// start passed; see Note [watchdog times].
	start, stop binding.Event
	startedAt   atomic.Int64
	bufs        []*buf     // staging buffers to give back on success
	copies      []copyBack // pinned -> caller's tensors, on success
	post        func()     // host work after the copies (bitwise reductions)
}

// copyBack is a download's last step: pinned memory to the caller's tensor.
type copyBack struct{ dst, src []byte }

// Note [watchdog times]
//
// What the watchdog knows of when a collective ran goes into its
// Future (pg.Future.CompleteAt), which is where pg/flight reads it
// (pg/flight's Note [event times]); the group keeps no recorder of its
// own. A collective is found started when the watchdog finds its start
// event passed (Options.EnableTiming, torch's time_discovered_started),
// else, the stream being in order, when it found the end event of the
// collective before it passed, or at its issue if later. It is found
// completed when the watchdog finds its end event passed (torch's
// time_discovered_completed), and with timing its duration is
// cuEventElapsedTime(start, stop), torch's duration_ms. Send and Recv,
// on their lanes' streams, are not timed: only their completion is
// known.

// finish completes w with err: on success the results are copied into
// the caller's tensors and the staging buffers return to the pool; on
// failure the tensors are left untouched and the buffers are not reused,
// since the aborted stream may still write them. started is when the
// stream reached w, as far as the caller knows (zero: unknown).
func (w *work) finish(g *Group, err error, now time.Time, started time.Time) {
	t := pg.OpTimes{Started: w.startTime(started)}
	if err == nil {
		for _, c := range w.copies {
			copy(c.dst, c.src)
		}
		if w.post != nil {
			w.post()
		}
		g.pool.put(w.bufs...)
		t.Completed, t.Duration = now, w.elapsed(g)
	}
	for _, ev := range []binding.Event{w.ev, w.start, w.stop} {
		if ev != nil {
			_ = ev.Destroy()
		}
	}
	w.fut.CompleteAt(err, t)
	if g.hooks.Active() {
		s := t.Started
		if s.IsZero() {
			s = w.issued
		}
		g.hooks.Deliver(pg.WorkInfo{Op: w.op, Seq: w.seq, Rank: g.rank, Dtype: w.dtype, InBytes: w.inBytes,
			OutBytes: w.outBytes, Issued: w.issued, Started: s, Finished: now, Err: err})
	}
}

// startTime is when w was found started (Note [watchdog times]), or zero.
func (w *work) startTime(started time.Time) time.Time {
	if ns := w.startedAt.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	if started.IsZero() {
		return started
	}
	if started.Before(w.issued) {
		return w.issued
	}
	return started
}

// elapsed is w's time on the GPU, from its timing events once its end
// event has passed, or 0 without them.
func (w *work) elapsed(g *Group) time.Duration {
	if w.start == nil || w.stop == nil {
		return 0
	}
	d, err := w.stop.Elapsed(w.start)
	if err != nil {
		g.log.Debug("nccl: no elapsed time for a collective", zap.Stringer("op", w.op), zap.Uint64("seq", w.seq),
			zap.Error(err))
		return 0
	}
	return d
}
