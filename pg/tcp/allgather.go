package tcp

import "github.com/goddp/ddp/pg"

// allGather is the ring allgather: out holds n segments, one per rank.
// This rank copies its input into segment me; then at step s in [0, n-1)
// it sends segment me-s to its right neighbour and receives segment
// me-s-1 from its left one, straight into place (every destination is
// posted before the first frame goes out). Chunks are pipelined: chunk c
// moves on as soon as it is in, while later chunks are still arriving.
func (g *Group) allGather(r *run, out, in pg.Tensor) error {
	n, me := g.size, g.rank
	if n > 1 && len(in.Data) > 0 && g.shm != nil && g.shm.Full() {
		return g.shm.AllGather(r, out, in)
	}
	p := newPlan(out, n, g.opts.ChunkBytes, pipelineDepth, n-1)
	lo, hi := p.seg(me)
	copy(out.Slice(lo, hi).Data, in.Data)
	if n == 1 || len(in.Data) == 0 {
		return nil
	}
	left, right := g.links[mod(me-1, n)], g.links[mod(me+1, n)]
	for s := range n - 1 {
		for c := range p.chunks {
			if ch := p.chunk(me-s-1, c).Data; len(ch) > 0 {
				if err := r.post(left, p.tag(s, c), ch); err != nil {
					return err
				}
			}
		}
	}
	for s := range n - 1 {
		for c := range p.chunks {
			ch := p.chunk(me-s, c).Data
			if len(ch) == 0 {
				continue
			}
			if s > 0 {
				if err := r.waitPosted(left, p.tag(s-1, c)); err != nil {
					return err
				}
			}
			if err := r.send(right, p.tag(s, c), ch); err != nil {
				return err
			}
		}
	}
	for c := range p.chunks {
		if len(p.chunk(me-n+1, c).Data) > 0 {
			if err := r.waitPosted(left, p.tag(n-2, c)); err != nil {
				return err
			}
		}
	}
	return r.flush()
}
