package tcp

import "github.com/goddp/ddp/pg"

// gather is the flat gather, as gloo's: every rank sends its input to
// root, chunk by chunk, and root receives each straight into its place
// in out (every destination is posted before root waits for the first).
// Every rank sends at least one frame, even for an empty input, so that
// ranks that disagree on the length fail with pg.ErrMismatch. When every
// rank shares this host, shmGather moves the data instead.
func (g *Group) gather(r *run, out, in pg.Tensor, root int) error {
	n, me := g.size, g.rank
	if n > 1 && g.shm != nil && g.shm.Full() {
		return g.shm.Gather(r, out, in, root)
	}
	k := in.Len()
	if me == root {
		copy(out.Slice(me*k, (me+1)*k).Data, in.Data)
	}
	if n == 1 {
		return nil
	}
	p := newPlan(in, 1, g.opts.ChunkBytes, 1, 1)
	frames := max(1, p.chunks)
	if me != root {
		for c := range frames {
			if err := r.send(g.links[root], p.tag(0, c), p.chunk(0, c).Data); err != nil {
				return err
			}
		}
		return r.flush()
	}
	for j := range n {
		if j == me {
			continue
		}
		for c := range frames {
			if err := r.post(g.links[j], p.tag(0, c), sub(out, j*k, (j+1)*k, c, p.ce).Data); err != nil {
				return err
			}
		}
	}
	for j := range n {
		if j == me {
			continue
		}
		for c := range frames {
			if err := r.waitPosted(g.links[j], p.tag(0, c)); err != nil {
				return err
			}
		}
	}
	return nil
}
