package tcp

import "github.com/goddp/ddp/pg"

// Coalesced collectives run as one collective: one sequence number, one
// Work. The tensors are grouped by dtype, in order of first appearance;
// the tensors of each group are packed into one buffer, which the plain
// collective's algorithm moves, and unpacked afterwards (a group of one
// tensor runs in place). Each group's frames carry its index in the
// header's Flags (run.sub), so that the groups' tags never collide.

// byDtype returns the indexes of ts grouped by dtype, in order of first
// appearance. There are fewer groups than dtypes, which fit in a uint8.
func byDtype(ts []pg.Tensor) [][]int {
	var groups [][]int
	at := map[pg.Dtype]int{}
	for i, t := range ts {
		k, ok := at[t.Dtype]
		if !ok {
			k = len(groups)
			at[t.Dtype] = k
			groups = append(groups, nil)
		}
		groups[k] = append(groups[k], i)
	}
	return groups
}

// allReduceCoalesced packs each dtype's tensors and allreduces them.
func (g *Group) allReduceCoalesced(r *run, ts []pg.Tensor, op pg.ReduceOp) error {
	for k, idx := range byDtype(ts) {
		r.sub = uint8(k)
		if len(idx) == 1 {
			if err := g.allReduce(r, ts[idx[0]], op); err != nil {
				return err
			}
			continue
		}
		total := 0
		for _, i := range idx {
			total += ts[i].Len()
		}
		flat := pg.NewTensor(ts[idx[0]].Dtype, total)
		off := 0
		for _, i := range idx {
			off += copy(flat.Data[off:], ts[i].Data)
		}
		if err := g.allReduce(r, flat, op); err != nil {
			return err
		}
		off = 0
		for _, i := range idx {
			off += copy(ts[i].Data, flat.Data[off:])
		}
	}
	return nil
}

// allGatherCoalesced packs each dtype's inputs into one, allgathers it,
// and unpacks rank j's part into segment j of every output.
func (g *Group) allGatherCoalesced(r *run, outs, ins []pg.Tensor) error {
	n := g.size
	for k, idx := range byDtype(ins) {
		r.sub = uint8(k)
		if len(idx) == 1 {
			if err := g.allGather(r, outs[idx[0]], ins[idx[0]]); err != nil {
				return err
			}
			continue
		}
		per := 0 // bytes per rank
		for _, i := range idx {
			per += len(ins[i].Data)
		}
		d := ins[idx[0]].Dtype
		flatIn := pg.NewTensor(d, per/d.Size())
		off := 0
		for _, i := range idx {
			off += copy(flatIn.Data[off:], ins[i].Data)
		}
		flatOut := pg.NewTensor(d, n*flatIn.Len())
		if err := g.allGather(r, flatOut, flatIn); err != nil {
			return err
		}
		for j := range n {
			off := j * per
			for _, i := range idx {
				b := len(ins[i].Data)
				off += copy(outs[i].Data[j*b:(j+1)*b], flatOut.Data[off:off+b])
			}
		}
	}
	return nil
}

// reduceScatterCoalesced packs segment j of each dtype's inputs into
// segment j of one input, reduce-scatters it, and unpacks this rank's
// segment into the outputs.
func (g *Group) reduceScatterCoalesced(r *run, outs, ins []pg.Tensor, op pg.ReduceOp) error {
	n := g.size
	for k, idx := range byDtype(ins) {
		r.sub = uint8(k)
		if len(idx) == 1 {
			if err := g.reduceScatter(r, outs[idx[0]], ins[idx[0]], op); err != nil {
				return err
			}
			continue
		}
		per := 0 // bytes per segment
		for _, i := range idx {
			per += len(outs[i].Data)
		}
		d := ins[idx[0]].Dtype
		flatIn := pg.NewTensor(d, n*per/d.Size())
		for j := range n {
			off := j * per
			for _, i := range idx {
				b := len(outs[i].Data)
				off += copy(flatIn.Data[off:off+b], ins[i].Data[j*b:(j+1)*b])
			}
		}
		flatOut := pg.NewTensor(d, per/d.Size())
		if err := g.reduceScatter(r, flatOut, flatIn, op); err != nil {
			return err
		}
		off := 0
		for _, i := range idx {
			off += copy(outs[i].Data, flatOut.Data[off:])
		}
	}
	return nil
}
