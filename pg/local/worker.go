package local

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// task is one issued collective on its way through a rank's worker.
type task struct {
	// ctx is the caller's context for this one collective, carried to the
	// worker with the request like an http.Request's; it is not group
	// state.
	ctx     context.Context
	seq     uint64
	desc    desc
	args    args
	timeout time.Duration
	waitAll bool
	size    int // the group size, for bytes
	rank    int // this rank, for bytes
	fut     *pg.Future

	// For the completion hooks.
	issued, started time.Time
}

// submit numbers t in issue order and queues it for the worker.
func (g *Group) submit(ctx context.Context, t *task) pg.Work {
	if err := backend.CheckContext(ctx); err != nil {
		return g.invalid(t.desc.kind, err)
	}
	t.ctx, t.issued, t.size, t.rank = ctx, time.Now(), g.Size(), g.rank
	g.mu.Lock()
	if g.stopKind != nil {
		g.mu.Unlock()
		return pg.Completed(g.stopped(t.desc.kind))
	}
	g.seq++
	t.seq = g.seq
	t.fut = pg.NewSeqFuture(t.seq)
	g.queue = append(g.queue, t)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default: // the worker is already due to look at the queue
	}
	return t.fut
}

// loop is the rank's worker: it runs the queued collectives one at a time,
// in issue order, until the group stops.
func (g *Group) loop() {
	defer close(g.exited)
	for {
		t, ok := g.next()
		if !ok {
			return
		}
		t.started = time.Now()
		g.complete(t, g.run(t))
	}
}

// complete finishes t with err and tells the completion hooks.
func (g *Group) complete(t *task, err error) {
	t.fut.Complete(err)
	if !g.hooks.Active() {
		return
	}
	started := t.started
	if started.IsZero() {
		started = time.Now()
	}
	in, out := t.bytes()
	g.hooks.Deliver(pg.WorkInfo{
		Op: t.desc.kind.opType(), Seq: t.seq, Rank: g.rank, Dtype: t.dtype(),
		InBytes: in, OutBytes: out,
		Issued: t.issued, Started: started, Finished: time.Now(), Err: err,
	})
}

// dtype is the dtype completion hooks see: the first tensor's for the
// coalesced collectives.
func (t *task) dtype() pg.Dtype {
	if len(t.args.ins) > 0 {
		return t.args.ins[0].Dtype
	}
	return t.desc.dtype
}

// bytes are the sizes of this rank's input and output buffers.
func (t *task) bytes() (in, out int64) {
	a := t.args
	switch t.desc.kind {
	case opAllReduce, opBroadcast, opReduce:
		return int64(len(a.in.Data)), int64(len(a.in.Data))
	case opAllGather, opReduceScatter, opAllToAll:
		return int64(len(a.in.Data)), int64(len(a.out.Data))
	case opGather, opScatter:
		// Only the root's out of Gather and in of Scatter are used.
		in, out = int64(len(a.in.Data)), int64(len(a.out.Data))
		if t.rank != t.desc.root {
			if t.desc.kind == opGather {
				out = 0
			} else {
				in = 0
			}
		}
		return in, out
	case opAllReduceCoalesced, opAllGatherCoalesced, opReduceScatterCoalesced:
		for i, x := range a.ins {
			in += int64(len(x.Data))
			if a.outs != nil {
				out += int64(len(a.outs[i].Data))
			} else {
				out += int64(len(x.Data))
			}
		}
		return in, out
	case opNewGroup:
		return int64(8 * len(a.ranks)), int64(8 * len(a.ranks) * len(a.ranks))
	case opSplit:
		return 16, int64(16 * t.size)
	}
	return 0, 0
}

// next returns the oldest queued task, waiting for one, or false once the
// group has stopped.
func (g *Group) next() (*task, bool) {
	for {
		g.mu.Lock()
		if g.stopKind != nil {
			g.mu.Unlock()
			return nil, false
		}
		if len(g.queue) > 0 {
			t := g.queue[0]
			g.queue[0] = nil
			g.queue = g.queue[1:]
			g.mu.Unlock()
			return t, true
		}
		g.mu.Unlock()
		select {
		case <-g.wake:
		case <-g.stop:
		}
	}
}

// run takes one collective through its slot: prepare, arrive, wait for
// the peers, compute this rank's share, wait for the peers to finish
// theirs, finish.
func (g *Group) run(t *task) error {
	n := g.Size()
	a := prepare(t.desc, t.args, n, g.rank)
	s, f := g.w.arrive(g.rank, t.seq, t.desc, a)
	arrived := f == nil
	if arrived {
		f = g.w.await(t.ctx, s, g.rank, t.timeout)
	}
	if f != nil {
		g.w.release(s, g.rank)
		return g.fail(t, f, arrived)
	}
	compute(s, g.rank)
	g.w.depart(s)
	g.w.release(s, g.rank)
	finish(t.desc, a, n, g.rank)
	return nil
}

// fail turns a broken slot into this rank's error: its own Close or Abort
// if it stopped, or else the failure as seen from this rank.
func (g *Group) fail(t *task, f failure, arrived bool) error {
	err := g.stopped(t.desc.kind)
	if err == nil {
		err = f.errFor(view{op: t.desc.kind, rank: g.rank, arrived: arrived, waitAll: t.waitAll})
	}
	g.log.Debug("collective failed", zap.Uint64("seq", t.seq), zap.Stringer("collective", t.desc), zap.Error(err))
	return err
}
