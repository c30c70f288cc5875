package nccl

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// The coalesced collectives issue one NCCL call per tensor inside one
// ncclGroupStart/End, as ProcessGroupNCCL's coalescing manager: one Work,
// one sequence number, one event.

// AllReduceCoalesced reduces every tensor of ts in place.
func (g *Group) AllReduceCoalesced(ctx context.Context, ts []pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduceCoalesced(ts, op, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpAllReduceCoalesced, pg.NoPeer, err)
	}
	var n int64
	for i, t := range ts {
		if err := g.deviceAllReduce("allreduce_coalesced", op, t); err != nil {
			return g.invalid(pg.OpAllReduceCoalesced, pg.NoPeer, fmt.Errorf("tensor %d: %w", i, err))
		}
		n += int64(t.Bytes())
	}
	return g.issue(ctx, desc{op: pg.OpAllReduceCoalesced, peer: pg.NoPeer, dtype: firstDtype(ts), inBytes: n, outBytes: n},
		func(s *stager) ([]part, error) {
			return coalesce(len(ts), func(i int) (part, error) { return s.allReduce(ts[i], op) })
		})
}

// AllGatherCoalesced is AllGather(outs[i], ins[i]) for every i.
func (g *Group) AllGatherCoalesced(ctx context.Context, outs, ins []pg.Tensor) pg.Work {
	if err := backend.CheckAllGatherCoalesced(outs, ins, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpAllGatherCoalesced, pg.NoPeer, err)
	}
	var in, out int64
	for i := range ins {
		if _, err := g.onDevice("allgather_coalesced", outs[i], ins[i]); err != nil {
			return g.invalid(pg.OpAllGatherCoalesced, pg.NoPeer, fmt.Errorf("tensor %d: %w", i, err))
		}
		in, out = in+int64(ins[i].Bytes()), out+int64(outs[i].Bytes())
	}
	return g.issue(ctx,
		desc{op: pg.OpAllGatherCoalesced, peer: pg.NoPeer, dtype: firstDtype(ins), inBytes: in, outBytes: out},
		func(s *stager) ([]part, error) {
			return coalesce(len(ins), func(i int) (part, error) { return s.allGather(outs[i], ins[i]) })
		})
}

// ReduceScatterCoalesced is ReduceScatter(outs[i], ins[i], op) for every i.
func (g *Group) ReduceScatterCoalesced(ctx context.Context, outs, ins []pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatterCoalesced(outs, ins, op, g.size, backend.AcceptDevice); err != nil {
		return g.invalid(pg.OpReduceScatterCoalesced, pg.NoPeer, err)
	}
	var in, out int64
	for i := range ins {
		if err := g.deviceAllReduce("reducescatter_coalesced", op, outs[i], ins[i]); err != nil {
			return g.invalid(pg.OpReduceScatterCoalesced, pg.NoPeer, fmt.Errorf("tensor %d: %w", i, err))
		}
		in, out = in+int64(ins[i].Bytes()), out+int64(outs[i].Bytes())
	}
	return g.issue(ctx,
		desc{op: pg.OpReduceScatterCoalesced, peer: pg.NoPeer, dtype: firstDtype(ins), inBytes: in, outBytes: out},
		func(s *stager) ([]part, error) {
			return coalesce(len(ins), func(i int) (part, error) { return s.reduceScatter(outs[i], ins[i], op) })
		})
}

func coalesce(n int, f func(i int) (part, error)) ([]part, error) {
	parts := make([]part, 0, n+1)
	for i := 0; i < n; i++ {
		p, err := f(i)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return parts, nil
}

func firstDtype(ts []pg.Tensor) pg.Dtype {
	if len(ts) == 0 {
		return 0
	}
	return ts[0].Dtype
}
