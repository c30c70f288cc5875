package tcp

import (
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// reduceScatter is the ring reduce-scatter: in holds n segments and
// segment me of the reduction lands in out. At step s in [0, n-1) this
// rank sends its running sum of segment me-s-1 to its right neighbour
// (at step 0, just its own contribution) and receives the left
// neighbour's sum of segment me-s-2, adds its own contribution and sends
// that on at the next step. The last step's frames are the sums of
// segment me from every other rank; they go straight into out, and this
// rank adds its own. Chunks are pipelined as in the ring allreduce.
func (g *Group) reduceScatter(r *run, out, in pg.Tensor, op pg.ReduceOp) error {
	n, me := g.size, g.rank
	if n > 1 && len(out.Data) > 0 && g.shm != nil && g.shm.Full() {
		return g.shm.ReduceScatter(r, out, in, op)
	}
	if kernel.Scales(op, in.Dtype) { // scale a copy: the caller's input stays as it was
		c := pg.NewTensor(in.Dtype, in.Len())
		copy(c.Data, in.Data)
		kernel.Prepare(c, op, n)
		in = c
	}
	if n == 1 {
		copy(out.Data, in.Data)
		kernel.Finish(out, op, n)
		return nil
	}
	if len(out.Data) == 0 {
		return nil
	}
	kind := kernel.BaseKind(op)
	left, right := g.links[mod(me-1, n)], g.links[mod(me+1, n)]
	p := newPlan(in, n, g.opts.ChunkBytes, pipelineDepth, n-1)
	last := n - 2
	outChunk := func(c int) pg.Tensor { return sub(out, 0, out.Len(), c, p.ce) }

	for c := range p.chunks {
		if ch := outChunk(c).Data; len(ch) > 0 {
			if err := r.post(left, p.tag(last, c), ch); err != nil {
				return err
			}
		}
	}
	for c := range p.chunks {
		if ch := p.chunk(me-1, c).Data; len(ch) > 0 {
			if err := r.send(right, p.tag(0, c), ch); err != nil {
				return err
			}
		}
	}
	for s := 1; s <= last; s++ {
		for c := range p.chunks {
			own := p.chunk(me-s-1, c)
			if len(own.Data) == 0 {
				continue
			}
			buf, err := r.recv(left, p.tag(s-1, c), len(own.Data))
			if err != nil {
				return err
			}
			kernel.Accumulate(pg.Tensor{Dtype: in.Dtype, Data: buf}, own, kind)
			if err := r.sendPooled(right, p.tag(s, c), buf); err != nil {
				return err
			}
		}
	}
	for c := range p.chunks {
		if len(outChunk(c).Data) == 0 {
			continue
		}
		if err := r.waitPosted(left, p.tag(last, c)); err != nil {
			return err
		}
		kernel.Accumulate(outChunk(c), p.chunk(me, c), kind)
	}
	if err := r.flush(); err != nil {
		return err
	}
	kernel.Finish(out, op, n)
	return nil
}
