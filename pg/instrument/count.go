package instrument

import (
	"context"
	"sync/atomic"

	"github.com/goddp/ddp/pg"
)

// Counter is a process group that counts the calls issued through it and
// the bytes each hands over: the input tensors' (for Broadcast, the
// tensor on every rank; for Scatter, root's in; a Recv hands over
// nothing). The reducer counts a comm hook's bytes with one; so does
// bench/commhooks.
//
// A Counter hides none of its group's abilities, and counts through
// them: pg.As on it for pg.Rooted, pg.AllToAller, pg.PointToPoint,
// pg.Coalescer, pg.Splitter or pg.Extended finds a view that counts and
// forwards, when the group inside has the ability (and nothing when it
// lacks it). Subgroups made through its Splitter are Counters adding to
// the same counts. Other abilities (pg.MonitoredBarrierer,
// pg.CompletionHooker, backend.DeviceBucketAllocator, or interfaces that
// combine several) are found on the group inside and are not counted.
// See pg's Note [wrappers keep abilities].
type Counter struct {
	pg.ProcessGroup
	n *counts // shared with subgroups
}

type counts struct{ bytes, calls atomic.Int64 }

// Count returns g wrapped in a Counter at zero. Closing the Counter
// closes g.
func Count(g pg.ProcessGroup) *Counter { return &Counter{g, new(counts)} }

// Bytes is the bytes handed over so far, subgroups' included.
func (c *Counter) Bytes() int64 { return c.n.bytes.Load() }

// Calls is the number of calls issued so far, subgroups' included.
func (c *Counter) Calls() int64 { return c.n.calls.Load() }

// Inner is the counted group.
func (c *Counter) Inner() pg.ProcessGroup { return c.ProcessGroup }

// Backend is the counted group's backend name.
func (c *Counter) Backend() string { return pg.BackendName(c.ProcessGroup) }

func (c *Counter) add(bytes int) {
	c.n.calls.Add(1)
	c.n.bytes.Add(int64(bytes))
}

// AllReduce counts t and forwards.
func (c *Counter) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	c.add(t.Bytes())
	return c.ProcessGroup.AllReduce(ctx, t, op)
}

// Broadcast counts t, on every rank, and forwards.
func (c *Counter) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	c.add(t.Bytes())
	return c.ProcessGroup.Broadcast(ctx, t, root)
}

// AllGather counts in and forwards.
func (c *Counter) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	c.add(in.Bytes())
	return c.ProcessGroup.AllGather(ctx, out, in)
}

// ReduceScatter counts in and forwards.
func (c *Counter) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	c.add(in.Bytes())
	return c.ProcessGroup.ReduceScatter(ctx, out, in, op)
}

// Barrier counts a call of no bytes and forwards.
func (c *Counter) Barrier(ctx context.Context) pg.Work {
	c.add(0)
	return c.ProcessGroup.Barrier(ctx)
}

// As sets *target to a counting view of the ability target points to,
// if it is one a Counter counts and the group inside has it; pg.As
// calls it.
func (c *Counter) As(target any) bool {
	switch t := target.(type) {
	case *pg.Rooted:
		return view(c, t, func(x pg.Rooted) pg.Rooted { return countedRooted{c, x} })
	case *pg.AllToAller:
		return view(c, t, func(x pg.AllToAller) pg.AllToAller { return countedAllToAll{c, x} })
	case *pg.PointToPoint:
		return view(c, t, func(x pg.PointToPoint) pg.PointToPoint { return countedP2P{c, x} })
	case *pg.Coalescer:
		return view(c, t, func(x pg.Coalescer) pg.Coalescer { return countedCoalescer{c, x} })
	case *pg.Splitter:
		return view(c, t, func(x pg.Splitter) pg.Splitter { return countedSplitter{c, x} })
	case *pg.Extended:
		return view(c, t, func(x pg.Extended) pg.Extended {
			return countedExtended{c, countedRooted{c, x}, countedAllToAll{c, x}, countedP2P{c, x}, countedCoalescer{c, x},
				countedSplitter{c, x}, x, x}
		})
	}
	return false
}

// view finds T inside c and sets *target to its counting view.
func view[T any](c *Counter, target *T, wrap func(T) T) bool {
	var x T
	if !pg.As(c.ProcessGroup, &x) {
		return false
	}
	*target = wrap(x)
	return true
}

type countedRooted struct {
	c *Counter
	x pg.Rooted
}

func (v countedRooted) Reduce(ctx context.Context, t pg.Tensor, root int, op pg.ReduceOp) pg.Work {
	v.c.add(t.Bytes())
	return v.x.Reduce(ctx, t, root, op)
}

func (v countedRooted) Gather(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	v.c.add(in.Bytes())
	return v.x.Gather(ctx, out, in, root)
}

func (v countedRooted) Scatter(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	v.c.add(in.Bytes())
	return v.x.Scatter(ctx, out, in, root)
}

type countedAllToAll struct {
	c *Counter
	x pg.AllToAller
}

func (v countedAllToAll) AllToAll(ctx context.Context, out, in pg.Tensor, outSplits, inSplits []int) pg.Work {
	v.c.add(in.Bytes())
	return v.x.AllToAll(ctx, out, in, outSplits, inSplits)
}

type countedP2P struct {
	c *Counter
	x pg.PointToPoint
}

func (v countedP2P) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	v.c.add(t.Bytes())
	return v.x.Send(ctx, t, dst, tag)
}

func (v countedP2P) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	v.c.add(0)
	return v.x.Recv(ctx, t, src, tag)
}

type countedCoalescer struct {
	c *Counter
	x pg.Coalescer
}

func total(ts []pg.Tensor) int {
	n := 0
	for _, t := range ts {
		n += t.Bytes()
	}
	return n
}

func (v countedCoalescer) AllReduceCoalesced(ctx context.Context, ts []pg.Tensor, op pg.ReduceOp) pg.Work {
	v.c.add(total(ts))
	return v.x.AllReduceCoalesced(ctx, ts, op)
}

func (v countedCoalescer) AllGatherCoalesced(ctx context.Context, outs, ins []pg.Tensor) pg.Work {
	v.c.add(total(ins))
	return v.x.AllGatherCoalesced(ctx, outs, ins)
}

func (v countedCoalescer) ReduceScatterCoalesced(ctx context.Context, outs, ins []pg.Tensor, op pg.ReduceOp) pg.Work {
	v.c.add(total(ins))
	return v.x.ReduceScatterCoalesced(ctx, outs, ins, op)
}

// countedSplitter makes subgroups that count into the parent's counts.
type countedSplitter struct {
	c *Counter
	x pg.Splitter
}

func (v countedSplitter) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	return v.sub(v.x.NewGroup(ctx, ranks))
}

func (v countedSplitter) Split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	return v.sub(v.x.Split(ctx, color, key))
}

func (v countedSplitter) sub(g pg.ProcessGroup, err error) (pg.ProcessGroup, error) {
	if g == nil {
		return nil, err // not a member, or failed
	}
	return &Counter{g, v.c.n}, err
}

// countedExtended is the whole set, every part counted but for the
// monitored barrier and completion hooks.
type countedExtended struct {
	*Counter
	countedRooted
	countedAllToAll
	countedP2P
	countedCoalescer
	countedSplitter
	pg.MonitoredBarrierer
	pg.CompletionHooker
}
