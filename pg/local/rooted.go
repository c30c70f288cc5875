package local

import (
	"context"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// The rooted collectives: Reduce, Gather and Scatter. Like AllReduce,
// every rank does its share straight from its peers' buffers.

// Reduce reduces t across ranks with op into root's t. The other ranks'
// t are left unchanged (AVG and PREMUL_SUM scale a copy of them).
func (g *Group) Reduce(ctx context.Context, t pg.Tensor, root int, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduce(t, root, op, g.Size()); err != nil {
		return g.invalid(opReduce, err)
	}
	d := desc{kind: opReduce, dtype: t.Dtype, len: t.Len(), root: root, op: op.Kind}
	return g.submit(ctx, &task{desc: d, args: args{in: t, op: op}, timeout: g.timeout})
}

// Gather writes rank i's in to chunk i of root's out. The other ranks'
// out is not touched.
func (g *Group) Gather(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	if err := backend.CheckGather(out, in, root, g.rank, g.Size()); err != nil {
		return g.invalid(opGather, err)
	}
	d := desc{kind: opGather, dtype: in.Dtype, len: in.Len(), root: root}
	return g.submit(ctx, &task{desc: d, args: args{in: in, out: out}, timeout: g.timeout})
}

// Scatter writes chunk i of root's in to rank i's out. Only root's in is
// read.
func (g *Group) Scatter(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	if err := backend.CheckScatter(out, in, root, g.rank, g.Size()); err != nil {
		return g.invalid(opScatter, err)
	}
	d := desc{kind: opScatter, dtype: out.Dtype, len: out.Len(), root: root}
	return g.submit(ctx, &task{desc: d, args: args{in: in, out: out}, timeout: g.timeout})
}

// reduceShard reduces elements [r*L/n, (r+1)*L/n) of every rank's input,
// in rank order, into root's buffer: the shard algorithm of AllReduce
// with one output.
func reduceShard(s *slot, r int, d desc) {
	n := len(s.args)
	lo, hi := r*d.len/n, (r+1)*d.len/n
	parts := make([]pg.Tensor, n)
	for i, a := range s.args {
		parts[i] = a.in.Slice(lo, hi)
	}
	// The root's in is its own t, scaled in place by prepare.
	kernel.ReduceN(parts[d.root:d.root+1], parts, kernel.BaseKind(pg.Op(d.op)))
}

// gather copies rank r's input into chunk r of root's output.
func gather(s *slot, r int, d desc) {
	b := d.len * d.dtype.Size()
	copy(s.args[d.root].out.Data[r*b:(r+1)*b], s.args[r].in.Data)
}

// scatter copies chunk r of root's input into rank r's output.
func scatter(s *slot, r int, d desc) {
	b := d.len * d.dtype.Size()
	copy(s.args[r].out.Data, s.args[d.root].in.Data[r*b:(r+1)*b])
}
