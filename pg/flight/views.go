package flight

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
)

// As sets *target to a recording view of the ability target points to,
// if it is one that communicates and the group inside has it; pg.As
// calls it. See pg's Note [wrappers keep abilities]: the view records
// and forwards, so sends, receives and rooted, all-to-all and coalesced
// collectives reach the ring too, and a group without the ability is
// not given one.
func (r *Recorder) As(target any) bool {
	switch t := target.(type) {
	case *pg.Rooted:
		return view(r, t, func(x pg.Rooted) pg.Rooted { return rooted{r, x} })
	case *pg.AllToAller:
		return view(r, t, func(x pg.AllToAller) pg.AllToAller { return allToAll{r, x} })
	case *pg.PointToPoint:
		return view(r, t, func(x pg.PointToPoint) pg.PointToPoint { return p2p{r, x} })
	case *pg.Coalescer:
		return view(r, t, func(x pg.Coalescer) pg.Coalescer { return coalescer{r, x} })
	case *pg.Splitter:
		return view(r, t, func(x pg.Splitter) pg.Splitter { return splitter{r, x} })
	case *pg.Extended:
		return view(r, t, func(x pg.Extended) pg.Extended {
			return extended{r, rooted{r, x}, allToAll{r, x}, p2p{r, x}, coalescer{r, x}, splitter{r, x}, x, x}
		})
	}
	return false
}

// view finds T inside r and sets *target to its recording view.
func view[T any](r *Recorder, target *T, wrap func(T) T) bool {
	var x T
	if !pg.As(r.ProcessGroup, &x) {
		return false
	}
	*target = wrap(x)
	return true
}

type rooted struct {
	r *Recorder
	x pg.Rooted
}

func (v rooted) Reduce(ctx context.Context, t pg.Tensor, root int, op pg.ReduceOp) pg.Work {
	n := tlen(t)
	return v.r.issue(call{op: pg.OpReduce, dtype: t.Dtype, in: n, out: n}, func() pg.Work {
		return v.x.Reduce(ctx, t, root, op)
	})
}

func (v rooted) Gather(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	return v.r.issue(call{op: pg.OpGather, dtype: in.Dtype, in: tlen(in), out: tlen(out)}, func() pg.Work {
		return v.x.Gather(ctx, out, in, root)
	})
}

func (v rooted) Scatter(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	return v.r.issue(call{op: pg.OpScatter, dtype: out.Dtype, in: tlen(in), out: tlen(out)}, func() pg.Work {
		return v.x.Scatter(ctx, out, in, root)
	})
}

type allToAll struct {
	r *Recorder
	x pg.AllToAller
}

func (v allToAll) AllToAll(ctx context.Context, out, in pg.Tensor, outSplits, inSplits []int) pg.Work {
	return v.r.issue(call{op: pg.OpAllToAll, dtype: in.Dtype, in: tlen(in), out: tlen(out)}, func() pg.Work {
		return v.x.AllToAll(ctx, out, in, outSplits, inSplits)
	})
}

type p2p struct {
	r *Recorder
	x pg.PointToPoint
}

func (v p2p) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	n := tlen(t)
	return v.r.issue(call{op: pg.OpSend, dtype: t.Dtype, in: n, out: n, p2p: true, peer: dst}, func() pg.Work {
		return v.x.Send(ctx, t, dst, tag)
	})
}

func (v p2p) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	n := tlen(t)
	return v.r.issue(call{op: pg.OpRecv, dtype: t.Dtype, in: n, out: n, p2p: true, peer: src}, func() pg.Work {
		return v.x.Recv(ctx, t, src, tag)
	})
}

type coalescer struct {
	r *Recorder
	x pg.Coalescer
}

// lens is the element counts of ts; coalesced calls are the only ones
// that allocate to be recorded.
func lens(ts []pg.Tensor) []int {
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = tlen(t)
	}
	return out
}

// firstDtype is the dtype recorded for a coalesced call.
func firstDtype(ts []pg.Tensor) pg.Dtype {
	if len(ts) == 0 {
		return 0
	}
	return ts[0].Dtype
}

func (v coalescer) AllReduceCoalesced(ctx context.Context, ts []pg.Tensor, op pg.ReduceOp) pg.Work {
	l := lens(ts)
	return v.r.issue(call{op: pg.OpAllReduceCoalesced, dtype: firstDtype(ts), ins: l, outs: l}, func() pg.Work {
		return v.x.AllReduceCoalesced(ctx, ts, op)
	})
}

func (v coalescer) AllGatherCoalesced(ctx context.Context, outs, ins []pg.Tensor) pg.Work {
	c := call{op: pg.OpAllGatherCoalesced, dtype: firstDtype(ins), ins: lens(ins), outs: lens(outs)}
	return v.r.issue(c, func() pg.Work { return v.x.AllGatherCoalesced(ctx, outs, ins) })
}

func (v coalescer) ReduceScatterCoalesced(ctx context.Context, outs, ins []pg.Tensor, op pg.ReduceOp) pg.Work {
	c := call{op: pg.OpReduceScatterCoalesced, dtype: firstDtype(ins), ins: lens(ins), outs: lens(outs)}
	return v.r.issue(c, func() pg.Work { return v.x.ReduceScatterCoalesced(ctx, outs, ins, op) })
}

// splitter makes subgroups that record into the parent's ring, so one
// dump per process holds every group, as torch's does.
type splitter struct {
	r *Recorder
	x pg.Splitter
}

func (v splitter) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	g, err := v.x.NewGroup(ctx, ranks)
	global := make([]int, 0, len(ranks))
	for _, q := range ranks {
		if q >= 0 && q < len(v.r.grp.ranks) {
			global = append(global, v.r.grp.ranks[q])
		}
	}
	return v.sub(g, err, global)
}

// Split's members are not known here without a collective of its own,
// so the subgroup's ranks are recorded as unknown (an empty list).
func (v splitter) Split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	g, err := v.x.Split(ctx, color, key)
	return v.sub(g, err, nil)
}

// sub wraps a new subgroup g, named after its parent and the number of
// subgroups the parent made before it (the same on every rank, since
// making a subgroup is collective).
func (v splitter) sub(g pg.ProcessGroup, err error, ranks []int) (pg.ProcessGroup, error) {
	r := v.r.ring
	r.mu.Lock()
	defer r.mu.Unlock()
	v.r.grp.splits++ // counted for members and non-members alike
	if g == nil {
		return nil, err // not a member, or failed
	}
	if len(ranks) != g.Size() {
		ranks = nil
	}
	gi := &groupInfo{
		id: len(r.groups), rank: g.Rank(),
		name: fmt.Sprintf("%s.%d", v.r.grp.name, v.r.grp.splits),
		desc: "subgroup", ranks: ranks,
		timeoutMS: v.r.grp.timeoutMS, onFailure: v.r.grp.onFailure,
	}
	r.groups = append(r.groups, gi)
	rec := &Recorder{ProcessGroup: g, ring: r, grp: gi}
	var a Attacher
	if pg.As(g, &a) {
		a.AttachFlight(rec) // the ring is the parent's: FlightEntries is not asked
	}
	return rec, err
}

// extended is the whole set, every part that communicates recorded but
// for the monitored barrier (which pg/desync and the backends report
// on their own) and completion hooks.
type extended struct {
	*Recorder
	rooted
	allToAll
	p2p
	coalescer
	splitter
	pg.MonitoredBarrierer
	pg.CompletionHooker
}
