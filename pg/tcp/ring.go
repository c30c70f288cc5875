package tcp

import (
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// ringAllReduce is the bandwidth-optimal allreduce (Patarasuk & Yuan;
// gloo's allreduce_ring_chunked): each rank sends 2(n-1)/n of the buffer,
// whatever n.
//
// The buffer is cut into n segments and each segment into chunks. Over
// 2(n-1) steps each rank sends to its right neighbour and receives from
// its left one:
//
//	reduce-scatter, step s in [0, n-1): send segment me-s, receive
//	    segment me-s-1 and add it into place; afterwards this rank owns
//	    the finished segment me+1.
//	allgather, step s in [0, n-1): send segment me+1-s, receive the
//	    finished segment me-s straight into place.
//
// The steps are pipelined chunk by chunk: chunk c of step s is sent as
// soon as chunk c of step s-1 is in, while later chunks are still on the
// wire, so sending (the writer), receiving (the reader) and reducing (here)
// overlap. Each finished chunk is reduced by exactly one rank and then
// copied around, so every rank ends with the same bits.
func (g *Group) ringAllReduce(r *run, t pg.Tensor, op pg.ReduceOp) error {
	n, me := g.size, g.rank
	left, right := g.links[mod(me-1, n)], g.links[mod(me+1, n)]
	steps := 2 * (n - 1)
	p := newPlan(t, n, g.opts.ChunkBytes, pipelineDepth, steps)
	kind := kernel.BaseKind(op)
	kernel.Prepare(t, op, n)

	send := func(s, c int) error {
		if s < n-1 {
			// Once written, the chunk is free for its finished value,
			// which arrives at allgather step s.
			ch := p.chunk(me-s, c).Data
			if len(ch) == 0 {
				return nil
			}
			return r.sendThenPost(right, p.tag(s, c), ch, left, p.tag(n-1+s, c), ch)
		}
		ch := p.chunk(me+1-(s-(n-1)), c).Data
		if len(ch) == 0 {
			return nil
		}
		return r.send(right, p.tag(s, c), ch)
	}
	recv := func(s, c int) error {
		if s < n-1 {
			ch := p.chunk(me-s-1, c)
			if len(ch.Data) == 0 {
				return nil
			}
			buf, err := r.recv(left, p.tag(s, c), len(ch.Data))
			if err != nil {
				return err
			}
			kernel.Accumulate(ch, pg.Tensor{Dtype: t.Dtype, Data: buf}, kind)
			r.release(buf)
			return nil
		}
		if len(p.chunk(me-(s-(n-1)), c).Data) == 0 {
			return nil
		}
		return r.waitPosted(left, p.tag(s, c))
	}

	for c := range p.chunks {
		if err := send(0, c); err != nil {
			return err
		}
	}
	for s := 1; s < steps; s++ {
		for c := range p.chunks {
			if err := recv(s-1, c); err != nil {
				return err
			}
			if err := send(s, c); err != nil {
				return err
			}
		}
	}
	for c := range p.chunks {
		if err := recv(steps-1, c); err != nil {
			return err
		}
	}
	if err := r.flush(); err != nil {
		return err
	}
	kernel.Finish(t, op, n)
	return nil
}
