package tcp

import (
	"math/bits"

	"github.com/goddp/ddp/pg"
)

// broadcast sends root's buffer down a binomial tree, pipelined by chunk.
//
// Ranks are renumbered so that root is 0 (v = me-root mod n). Rank v's
// parent is v with its lowest set bit cleared; its children are v+m for
// every power of two m below v's lowest set bit (below n for the root),
// largest subtree first. A rank receives each chunk straight into place
// and forwards it to its children while the next chunk is on its way, so
// the tree depth costs one chunk's latency per level, not a whole buffer's.
func (g *Group) broadcast(r *run, t pg.Tensor, root int) error {
	n, me := g.size, g.rank
	if n == 1 || len(t.Data) == 0 {
		return nil
	}
	if g.shm != nil && g.shm.Full() {
		return g.shm.Broadcast(r, t, root)
	}
	v := mod(me-root, n)
	p := newPlan(pg.Tensor{Dtype: pg.Uint8, Data: t.Data}, 1, g.opts.ChunkBytes, pipelineDepth, 1)

	top := 1 << bits.Len(uint(n-1)) // above every child offset of the root
	var parent *link
	if v != 0 {
		low := v & -v
		parent = g.links[mod(root+v-low, n)]
		top = low
	}
	var children []*link
	for m := top >> 1; m >= 1; m >>= 1 {
		if v+m < n {
			children = append(children, g.links[mod(root+v+m, n)])
		}
	}

	if parent != nil {
		for c := range p.chunks {
			if err := r.post(parent, p.tag(0, c), p.chunk(0, c).Data); err != nil {
				return err
			}
		}
	}
	for c := range p.chunks {
		if parent != nil {
			if err := r.waitPosted(parent, p.tag(0, c)); err != nil {
				return err
			}
		}
		for _, child := range children {
			if err := r.send(child, p.tag(0, c), p.chunk(0, c).Data); err != nil {
				return err
			}
		}
	}
	return r.flush()
}
