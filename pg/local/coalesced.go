package local

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// The coalesced collectives run a list of collectives of one kind as one:
// one slot, one sequence number, one Work. Every rank must pass as many
// tensors with the same dtypes and lengths; the lists are compared when
// the ranks arrive. Each tensor then runs the algorithm of its
// single-tensor collective.

// AllReduceCoalesced reduces every tensor of ts in place with op.
func (g *Group) AllReduceCoalesced(ctx context.Context, ts []pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduceCoalesced(ts, op); err != nil {
		return g.invalid(opAllReduceCoalesced, err)
	}
	d := desc{kind: opAllReduceCoalesced, len: len(ts), op: op.Kind}
	return g.submit(ctx, &task{desc: d, args: args{ins: ts, op: op}, timeout: g.timeout})
}

// AllGatherCoalesced is AllGather(outs[i], ins[i]) for every i, as one
// collective.
func (g *Group) AllGatherCoalesced(ctx context.Context, outs, ins []pg.Tensor) pg.Work {
	if err := backend.CheckAllGatherCoalesced(outs, ins, g.Size()); err != nil {
		return g.invalid(opAllGatherCoalesced, err)
	}
	d := desc{kind: opAllGatherCoalesced, len: len(ins)}
	return g.submit(ctx, &task{desc: d, args: args{ins: ins, outs: nonNil(outs)}, timeout: g.timeout})
}

// ReduceScatterCoalesced is ReduceScatter(outs[i], ins[i], op) for every
// i, as one collective. The inputs are left unchanged.
func (g *Group) ReduceScatterCoalesced(ctx context.Context, outs, ins []pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatterCoalesced(outs, ins, op, g.Size()); err != nil {
		return g.invalid(opReduceScatterCoalesced, err)
	}
	d := desc{kind: opReduceScatterCoalesced, len: len(ins), op: op.Kind}
	return g.submit(ctx, &task{desc: d, args: args{ins: ins, outs: nonNil(outs), op: op}, timeout: g.timeout})
}

// nonNil keeps an empty output list apart from AllReduceCoalesced's nil.
func nonNil(ts []pg.Tensor) []pg.Tensor {
	if ts == nil {
		return []pg.Tensor{}
	}
	return ts
}

// tensorsDisagree compares two ranks' input lists (their lengths are in
// desc).
func tensorsDisagree(k opKind, a, b int, ta, tb []pg.Tensor) string {
	for i := range ta {
		if ta[i].Dtype != tb[i].Dtype || ta[i].Len() != tb[i].Len() {
			return fmt.Sprintf("%v: tensor %d is %v x %d on rank %d but %v x %d on rank %d", k, i, ta[i].Dtype, ta[i].Len(), a,
				tb[i].Dtype, tb[i].Len(), b)
		}
	}
	return ""
}

// allReduceCoalesced runs the shard algorithm on every tensor.
func allReduceCoalesced(s *slot, r int, d desc) {
	n := len(s.args)
	parts := make([]pg.Tensor, n)
	for i := range d.len {
		l := s.args[r].ins[i].Len()
		lo, hi := r*l/n, (r+1)*l/n
		for j, a := range s.args {
			parts[j] = a.ins[i].Slice(lo, hi)
		}
		kernel.ReduceN(parts, parts, kernel.BaseKind(pg.Op(d.op)))
	}
}

// allGatherCoalesced copies every rank's inputs into rank r's outputs.
func allGatherCoalesced(s *slot, r int) {
	for i, out := range s.args[r].outs {
		o := out.Data
		for _, a := range s.args {
			o = o[copy(o, a.ins[i].Data):]
		}
	}
}

// reduceScatterCoalesced reduces chunk r of every rank's inputs into rank
// r's outputs.
func reduceScatterCoalesced(s *slot, r int, d desc) {
	ins := make([]pg.Tensor, len(s.args))
	for i, out := range s.args[r].outs {
		l := out.Len()
		for j, a := range s.args {
			ins[j] = a.ins[i].Slice(r*l, (r+1)*l)
		}
		kernel.ReduceN([]pg.Tensor{out}, ins, kernel.BaseKind(pg.Op(d.op)))
	}
}
