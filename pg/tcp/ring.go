package tcp

import (
	"slices"

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
	kernel.Prepare(t, op, g.size)
	if err := g.ringReduce(r, t, kernel.BaseKind(op), nil); err != nil {
		return err
	}
	kernel.Finish(t, op, g.size)
	return nil
}

// ringReduce is the ring between ranks (every rank of the group when
// nil; the hosts' leaders in hierAllReduce), combining with kind, without
// AllReduce's Prepare and Finish. It returns once this rank's frames are
// written.
func (g *Group) ringReduce(r *run, t pg.Tensor, kind pg.ReduceKind, ranks []int) error {
	n, me, left, right := g.neighbours(ranks)
	steps := 2 * (n - 1)
	p := newPlan(t, n, g.opts.ChunkBytes, pipelineDepth, steps)

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
	return r.flush()
}

// neighbours returns the size of the ring between ranks (every rank of
// the group when nil), this rank's place in it, and the links to its left
// and right neighbours.
func (g *Group) neighbours(ranks []int) (n, me int, left, right *link) {
	if ranks == nil {
		n, me = g.size, g.rank
		return n, me, g.links[mod(me-1, n)], g.links[mod(me+1, n)]
	}
	n, me = len(ranks), slices.Index(ranks, g.rank)
	return n, me, g.links[ranks[mod(me-1, n)]], g.links[ranks[mod(me+1, n)]]
}
