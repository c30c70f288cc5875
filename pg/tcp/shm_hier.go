package tcp

import (
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// hierAllReduce is AllReduce in a group spread over hosts some of which
// hold several ranks (Horovod's hierarchical allreduce, with shared
// memory inside each host):
//
//  1. each host's ranks reduce into its leader, its lowest rank: per
//     4 MiB chunk, the others copy their input into their slot and the
//     leader folds every member's slot and its own tensor, in rank
//     order, into its tensor;
//  2. the leaders allreduce over TCP, with the ring or recursive
//     doubling (as AllReduce picks between all ranks) over the leaders
//     alone: the only traffic between hosts;
//  3. each leader broadcasts the result to its host: per chunk, it
//     copies it into its slot and the others copy it out.
//
// The leaders' allreduce leaves the same bits on every leader, and the
// broadcast copies them, so every rank ends with the same bits. AVG and
// PREMUL_SUM scale each rank's own input first, and integer AVG divides
// at the end, over the whole group's size.
func (g *Group) hierAllReduce(r *run, t pg.Tensor, op pg.ReduceOp) error {
	h := g.hosts
	host := h.Hosts[h.Mine]
	kind := kernel.BaseKind(op)
	kernel.Prepare(t, op, g.size)
	if len(host) > 1 {
		if err := g.shm.ReduceToLeader(r, t, kind, host); err != nil {
			return err
		}
	}
	if g.rank == host[0] {
		var err error
		if len(t.Data) < g.opts.RingThreshold {
			err = g.doublingReduce(r, t, kind, h.Leaders)
		} else {
			err = g.ringReduce(r, t, kind, h.Leaders)
		}
		if err != nil {
			return err
		}
	}
	if len(host) > 1 {
		if err := g.shm.BroadcastFromLeader(r, t, kind, host); err != nil {
			return err
		}
	}
	kernel.Finish(t, op, g.size)
	return nil
}
