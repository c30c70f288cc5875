package nccl

import (
	"context"
	"time"

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

	ev     binding.Event
	bufs   []*buf     // staging buffers to give back on success
	copies []copyBack // pinned -> caller's tensors, on success
	post   func()     // host work after the copies (bitwise reductions)
}

// copyBack is a download's last step: pinned memory to the caller's tensor.
type copyBack struct{ dst, src []byte }

// finish completes w with err: on success the results are copied into
// the caller's tensors and the staging buffers return to the pool; on
// failure the tensors are left untouched and the buffers are not reused,
// since the aborted stream may still write them.
func (w *work) finish(g *Group, err error, now time.Time, started time.Time) {
	if err == nil {
		for _, c := range w.copies {
			copy(c.dst, c.src)
		}
		if w.post != nil {
			w.post()
		}
		g.pool.put(w.bufs...)
	}
	if w.ev != nil {
		_ = w.ev.Destroy()
	}
	w.fut.Complete(err)
	state := stateCompleted
	if err != nil {
		state = stateFailed
	}
	g.flight.finish(w.seq, w.op, state, now)
	if g.hooks.Active() {
		if started.IsZero() || started.Before(w.issued) {
			started = w.issued
		}
		g.hooks.Deliver(pg.WorkInfo{Op: w.op, Seq: w.seq, Rank: g.rank, Dtype: w.dtype, InBytes: w.inBytes,
			OutBytes: w.outBytes, Issued: w.issued, Started: started, Finished: now, Err: err})
	}
}
