package tcp

import (
	"context"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// AllReduce reduces t across ranks in place: recursive doubling below
// Options.RingThreshold bytes, the pipelined ring at and above it;
// through shared memory when every rank shares this host, and
// hierarchically (shm_hier.go) when the group spans hosts some of which
// hold several of its ranks.
func (g *Group) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduce(t, op); err != nil {
		return g.invalid(pg.OpAllReduce, err)
	}
	return g.submit(ctx, pg.OpAllReduce, inPlace(t), func(r *run) error { return g.allReduce(r, t, op) })
}

// allReduce picks AllReduce's algorithm for t.
func (g *Group) allReduce(r *run, t pg.Tensor, op pg.ReduceOp) error {
	switch {
	case g.size == 1:
		kernel.Prepare(t, op, 1)
		kernel.Finish(t, op, 1)
		return nil
	case len(t.Data) == 0:
		return nil
	case g.shm != nil && g.shm.Full():
		return g.shm.AllReduce(r, t, op)
	case g.hosts != nil:
		return g.hierAllReduce(r, t, op)
	case len(t.Data) < g.opts.RingThreshold:
		return g.doublingAllReduce(r, t, op)
	}
	return g.ringAllReduce(r, t, op)
}

// Broadcast copies root's t into t on every rank, down a pipelined
// binomial tree.
func (g *Group) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	if err := backend.CheckBroadcast(t, root, g.size); err != nil {
		return g.invalid(pg.OpBroadcast, err)
	}
	return g.submit(ctx, pg.OpBroadcast, inPlace(t), func(r *run) error { return g.broadcast(r, t, root) })
}

// AllGather gathers every rank's in into out, around the ring.
func (g *Group) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	if err := backend.CheckAllGather(out, in, g.size); err != nil {
		return g.invalid(pg.OpAllGather, err)
	}
	return g.submit(ctx, pg.OpAllGather, outIn(out, in), func(r *run) error { return g.allGather(r, out, in) })
}

// ReduceScatter reduces in across ranks and leaves segment Rank() in
// out, around the ring.
func (g *Group) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatter(out, in, op, g.size); err != nil {
		return g.invalid(pg.OpReduceScatter, err)
	}
	return g.submit(ctx, pg.OpReduceScatter, outIn(out, in), func(r *run) error { return g.reduceScatter(r, out, in, op) })
}

// Barrier finishes once every rank has entered it.
func (g *Group) Barrier(ctx context.Context) pg.Work {
	return g.submit(ctx, pg.OpBarrier, meta{}, g.barrier)
}

// MonitoredBarrier is c10d's monitored_barrier: it returns nil once every
// rank has arrived, or a *pg.MissingRanksError naming the ranks that did
// not arrive within timeout (the first of them only, unless waitAll). A
// timeout of zero means the group timeout. It runs in issue order with
// the other collectives, and a failure fails the group.
func (g *Group) MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error {
	if timeout <= 0 {
		timeout = g.opts.Timeout
	}
	w := g.submit(ctx, pg.OpMonitoredBarrier, meta{},
		func(r *run) error { return g.monitoredBarrier(r, timeout, waitAll) })
	<-w.Done()
	return w.Err()
}
