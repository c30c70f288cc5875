package tcp

import (
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// reduce is the binomial-tree reduce, pipelined by chunk.
//
// Ranks are renumbered so that root is 0 (v = me-root mod n). In round k
// (m = 2^k), a rank with bit m of v set sends its running sum to v-m and
// is done; the others add in what v+m sends, if v+m < n. So every rank
// but root sends once, and root ends with everything after ceil(lg n)
// rounds. The loop runs chunk by chunk: chunk c is passed up as soon as
// the children's chunk c is in, while their later chunks are still on the
// wire. A rank with children sums into scratch, so that only root's t
// changes; a leaf sends its t as it is, unless op scales it.
func (g *Group) reduce(r *run, t pg.Tensor, root int, op pg.ReduceOp) error {
	n, me := g.size, g.rank
	if n > 1 && len(t.Data) > 0 && g.shm != nil && g.shm.Full() {
		return g.shm.Reduce(r, t, root, op)
	}
	v := mod(me-root, n)
	var parentStep int
	var parent *link
	var children []*link // with the step at which each sends
	var steps []int
	for k, m := 0, 1; m < n; k, m = k+1, m<<1 {
		if v&m != 0 {
			parent, parentStep = g.links[mod(me-m, n)], k
			break
		}
		if v+m < n {
			children = append(children, g.links[mod(me+m, n)])
			steps = append(steps, k)
		}
	}
	acc := t
	if me != root && (len(children) > 0 || kernel.Scales(op, t.Dtype)) {
		acc = pg.NewTensor(t.Dtype, t.Len())
		copy(acc.Data, t.Data)
	}
	kernel.Prepare(acc, op, n)
	if n > 1 {
		kind := kernel.BaseKind(op)
		p := newPlan(acc, 1, g.opts.ChunkBytes, pipelineDepth, 32)
		for c := range max(1, p.chunks) { // one frame even when empty, so that lengths are checked
			ch := p.chunk(0, c)
			for i, child := range children {
				buf, err := r.recv(child, p.tag(steps[i], c), len(ch.Data))
				if err != nil {
					return err
				}
				kernel.Accumulate(ch, pg.Tensor{Dtype: t.Dtype, Data: buf}, kind)
				r.release(buf)
			}
			if parent != nil {
				if err := r.send(parent, p.tag(parentStep, c), ch.Data); err != nil {
					return err
				}
			}
		}
		if err := r.flush(); err != nil {
			return err
		}
	}
	if me == root {
		kernel.Finish(t, op, n)
	}
	return nil
}
