package tcp

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Reduce reduces t across ranks with op into root's t, up a binomial
// tree; the other ranks' t are left unchanged.
func (g *Group) Reduce(ctx context.Context, t pg.Tensor, root int, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduce(t, root, op, g.size); err != nil {
		return g.invalid(pg.OpReduce, err)
	}
	return g.submit(ctx, pg.OpReduce, inPlace(t), func(r *run) error { return g.reduce(r, t, root, op) })
}

// Gather writes every rank's in into root's out, rank by rank.
func (g *Group) Gather(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	if err := backend.CheckGather(out, in, root, g.rank, g.size); err != nil {
		return g.invalid(pg.OpGather, err)
	}
	m := outIn(out, in)
	if g.rank != root {
		m.out = 0
	}
	return g.submit(ctx, pg.OpGather, m, func(r *run) error { return g.gather(r, out, in, root) })
}

// Scatter writes chunk i of root's in into rank i's out.
func (g *Group) Scatter(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	if err := backend.CheckScatter(out, in, root, g.rank, g.size); err != nil {
		return g.invalid(pg.OpScatter, err)
	}
	m := meta{out.Dtype, int64(len(in.Data)), int64(len(out.Data))}
	if g.rank != root {
		m.in = 0
	}
	return g.submit(ctx, pg.OpScatter, m, func(r *run) error { return g.scatter(r, out, in, root) })
}

// AllToAll is c10d's alltoall_base: chunk j of in goes to rank j, which
// writes it to chunk Rank() of its out; see pg.AllToAller. Chunks may be
// uneven, and empty. Ranks whose splits disagree fail with pg.ErrMismatch
// naming the peer.
func (g *Group) AllToAll(ctx context.Context, out, in pg.Tensor, outSplits, inSplits []int) pg.Work {
	outS, inS, err := backend.CheckAllToAll(out, in, outSplits, inSplits, g.size)
	if err == nil && outS[g.rank] != inS[g.rank] {
		err = fmt.Errorf(
			"%w: alltoall sends %d elements from rank %d to itself but receives %d: input split %d must equal output split %d",
			pg.ErrInvalidArgument, inS[g.rank], g.rank, outS[g.rank], g.rank, g.rank)
	}
	if err != nil {
		return g.invalid(pg.OpAllToAll, err)
	}
	outS, inS = append([]int(nil), outS...), append([]int(nil), inS...) // the caller may reuse its slices
	return g.submit(ctx, pg.OpAllToAll, outIn(out, in), func(r *run) error { return g.allToAll(r, out, in, outS, inS) })
}

// AllReduceCoalesced reduces every tensor of ts in place with op, as one
// collective: the tensors of each dtype are packed into one buffer and
// reduced by AllReduce's algorithm.
func (g *Group) AllReduceCoalesced(ctx context.Context, ts []pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduceCoalesced(ts, op); err != nil {
		return g.invalid(pg.OpAllReduceCoalesced, err)
	}
	ts = append([]pg.Tensor(nil), ts...)
	return g.submit(ctx, pg.OpAllReduceCoalesced, sumMeta(ts, ts),
		func(r *run) error { return g.allReduceCoalesced(r, ts, op) })
}

// AllGatherCoalesced is AllGather(outs[i], ins[i]) for every i, as one
// collective.
func (g *Group) AllGatherCoalesced(ctx context.Context, outs, ins []pg.Tensor) pg.Work {
	if err := backend.CheckAllGatherCoalesced(outs, ins, g.size); err != nil {
		return g.invalid(pg.OpAllGatherCoalesced, err)
	}
	outs, ins = append([]pg.Tensor(nil), outs...), append([]pg.Tensor(nil), ins...)
	return g.submit(ctx, pg.OpAllGatherCoalesced, sumMeta(outs, ins),
		func(r *run) error { return g.allGatherCoalesced(r, outs, ins) })
}

// ReduceScatterCoalesced is ReduceScatter(outs[i], ins[i], op) for every
// i, as one collective.
func (g *Group) ReduceScatterCoalesced(ctx context.Context, outs, ins []pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatterCoalesced(outs, ins, op, g.size); err != nil {
		return g.invalid(pg.OpReduceScatterCoalesced, err)
	}
	outs, ins = append([]pg.Tensor(nil), outs...), append([]pg.Tensor(nil), ins...)
	return g.submit(ctx, pg.OpReduceScatterCoalesced, sumMeta(outs, ins),
		func(r *run) error { return g.reduceScatterCoalesced(r, outs, ins, op) })
}

// sumMeta is the meta of a coalesced collective: the first input's dtype
// and the total sizes.
func sumMeta(outs, ins []pg.Tensor) meta {
	var m meta
	for i, t := range ins {
		if i == 0 {
			m.dtype = t.Dtype
		}
		m.in += int64(len(t.Data))
	}
	for _, t := range outs {
		m.out += int64(len(t.Data))
	}
	return m
}
