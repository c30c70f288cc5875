package tcp

import (
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// scatter is the flat scatter, as gloo's: root sends chunk i of its input
// to rank i, which receives it straight into out. At least one frame goes
// to each rank, even for empty chunks, so that ranks that disagree on the
// length fail with pg.ErrMismatch. When every rank shares this host,
// shmScatter moves the data instead.
func (g *Group) scatter(r *run, out, in pg.Tensor, root int) error {
	n, me := g.size, g.rank
	if n > 1 && n <= shm.MaxPieces && g.shm != nil && g.shm.Full() {
		return g.shm.Scatter(r, out, in, root)
	}
	k := out.Len()
	if me == root {
		copy(out.Data, in.Slice(me*k, (me+1)*k).Data)
	}
	if n == 1 {
		return nil
	}
	p := newPlan(out, 1, g.opts.ChunkBytes, 1, 1)
	frames := max(1, p.chunks)
	if me != root {
		l := g.links[root]
		for c := range frames {
			if err := r.post(l, p.tag(0, c), p.chunk(0, c).Data); err != nil {
				return err
			}
		}
		for c := range frames {
			if err := r.waitPosted(l, p.tag(0, c)); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 1; i < n; i++ { // the nearest ranks first, as every rank numbers them
		j := mod(me+i, n)
		for c := range frames {
			if err := r.send(g.links[j], p.tag(0, c), sub(in, j*k, (j+1)*k, c, p.ce).Data); err != nil {
				return err
			}
		}
	}
	return r.flush()
}
