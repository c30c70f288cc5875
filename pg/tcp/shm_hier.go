package tcp

import (
	"slices"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// hostLayout is how a group that spans hosts, some of which hold several
// of its ranks, is spread over them: the same on every rank.
type hostLayout struct {
	hosts   [][]int // each host's ranks, ascending; hosts in order of their lowest rank
	leaders []int   // each host's lowest rank, ascending
	mine    int     // the index of this rank's host
}

func newHostLayout(hosts [][]int, rank int) *hostLayout {
	h := &hostLayout{hosts: hosts}
	for i, rs := range hosts {
		h.leaders = append(h.leaders, rs[0])
		if slices.Contains(rs, rank) {
			h.mine = i
		}
	}
	return h
}

// agreeHosts groups a group's ranks by host, from what every rank
// published: host[j] is the identity of rank j's host ("" if it shares
// memory with no one) and mapped[j] the ranks whose segments it mapped.
// Two ranks can share memory when each mapped the other's segment, and a
// host's world is a set of its ranks every two of which can. Each host
// starts from all its ranks and, until every two remaining ranks can,
// drops the rank that can share with the fewest of the others (the
// highest rank among equals): a rank that reaches no one, such as one in
// another network namespace, goes first and the others keep sharing.
// Ranks left in no world of two or more are hosts of their own. The
// result, hosts in order of their lowest rank, depends only on its
// inputs, which every rank reads alike from the store, so every rank
// computes the same.
func agreeHosts(host []string, mapped [][]int) [][]int {
	sets := make([]map[int]bool, len(mapped))
	for j, m := range mapped {
		sets[j] = make(map[int]bool, len(m))
		for _, k := range m {
			sets[j][k] = true
		}
	}
	can := func(a, b int) bool { return sets[a][b] && sets[b][a] }
	var out [][]int
	placed := make([]bool, len(host))
	for j, h := range host {
		if h == "" || placed[j] {
			continue
		}
		var set []int
		for k := j; k < len(host); k++ {
			if host[k] == h {
				set = append(set, k)
				placed[k] = true
			}
		}
		for len(set) > 1 {
			worst, least := -1, len(set)
			for _, a := range set {
				d := 0
				for _, b := range set {
					if a != b && can(a, b) {
						d++
					}
				}
				if d <= least {
					worst, least = a, d
				}
			}
			if least == len(set)-1 {
				break
			}
			set = slices.DeleteFunc(set, func(a int) bool { return a == worst })
		}
		if len(set) > 1 {
			out = append(out, set)
		}
	}
	shared := make([]bool, len(host))
	for _, set := range out {
		for _, r := range set {
			shared[r] = true
		}
	}
	for j := range host {
		if !shared[j] {
			out = append(out, []int{j})
		}
	}
	slices.SortFunc(out, func(a, b []int) int { return a[0] - b[0] })
	return out
}

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
	host := h.hosts[h.mine]
	kind := kernel.BaseKind(op)
	kernel.Prepare(t, op, g.size)
	if len(host) > 1 {
		if err := g.shmReduceToLeader(r, t, kind, host); err != nil {
			return err
		}
	}
	if g.rank == host[0] {
		var err error
		if len(t.Data) < g.opts.RingThreshold {
			err = g.doublingReduce(r, t, kind, h.leaders)
		} else {
			err = g.ringReduce(r, t, kind, h.leaders)
		}
		if err != nil {
			return err
		}
	}
	if len(host) > 1 {
		if err := g.shmBroadcastFromLeader(r, t, kind, host); err != nil {
			return err
		}
	}
	kernel.Finish(t, op, g.size)
	return nil
}

// Note [hierarchical slots]: in step 1 only the leader reads, from the
// members' slots; in step 3 only the members read, from the leader's. A
// rank writes a chunk into its slot once every rank that reads that slot
// has finished with the chunk it held before, two chunks earlier, which
// each says by publishing its done counter. Every member of the host runs
// every chunk of both steps, so the chunk numbers, and the slot each
// chunk uses, are the same on every member; each publishes done for
// every chunk (a chunk in which it reads nothing at once), so the
// counters a writer waits on never lag behind.

// shmReduceToLeader is step 1 of hierAllReduce: host's ranks reduce t
// into the leader's t.
func (g *Group) shmReduceToLeader(r *run, t pg.Tensor, kind pg.ReduceKind, host []int) error {
	s, me, leader := g.shm, g.rank, host[0]
	var ins []pg.Tensor
	if me == leader {
		ins = make([]pg.Tensor, len(host))
	}
	return g.shmChunks(t, kind, func(lo, hi int, c uint32, slot int, meta []byte) error {
		own := pg.Tensor{Dtype: t.Dtype, Data: t.Data[lo:hi]}
		if me != leader {
			if err := g.shmWait(r, leader, offDone, c-shmSlots); err != nil {
				return err
			}
			copy(s.slot(me, slot), own.Data)
			copy(s.meta(me, slot), meta)
			s.publish(me, offArrive, c)
			s.publish(me, offDone, c)
			return nil
		}
		for i, j := range host {
			if j == me {
				ins[i] = own
				continue
			}
			if err := g.shmWait(r, j, offArrive, c); err != nil {
				return err
			}
			if err := g.shmCheckMeta(r, j, slot, meta); err != nil {
				return err
			}
			ins[i] = pg.Tensor{Dtype: t.Dtype, Data: s.slot(j, slot)[:hi-lo]}
		}
		kernel.ReduceN([]pg.Tensor{own}, ins, kind)
		s.publish(me, offDone, c)
		return nil
	})
}

// shmBroadcastFromLeader is step 3 of hierAllReduce: the leader's t goes
// to host's other ranks.
func (g *Group) shmBroadcastFromLeader(r *run, t pg.Tensor, kind pg.ReduceKind, host []int) error {
	s, me, leader := g.shm, g.rank, host[0]
	return g.shmChunks(t, kind, func(lo, hi int, c uint32, slot int, meta []byte) error {
		if me == leader {
			for _, j := range host[1:] {
				if err := g.shmWait(r, j, offDone, c-shmSlots); err != nil {
					return err
				}
			}
			copy(s.slot(me, slot), t.Data[lo:hi])
			copy(s.meta(me, slot), meta)
			s.publish(me, offArrive, c)
			s.publish(me, offDone, c)
			return nil
		}
		if err := g.shmWait(r, leader, offArrive, c); err != nil {
			return err
		}
		if err := g.shmCheckMeta(r, leader, slot, meta); err != nil {
			return err
		}
		copy(t.Data[lo:hi], s.slot(leader, slot))
		s.publish(me, offDone, c)
		return nil
	})
}

// shmChunks calls f for each chunk of t that fits a slot, with its byte
// bounds, its number in the world's sequence, its slot and its metadata
// (an AllReduce's shmCall for that chunk).
func (g *Group) shmChunks(t pg.Tensor, kind pg.ReduceKind, f func(lo, hi int, c uint32, slot int, meta []byte) error) error {
	s := g.shm
	es := t.Dtype.Size()
	chunkBytes := shmSlotBytes / es * es
	call := shmCall{op: pg.OpAllReduce, bytes: len(t.Data), dtype: t.Dtype, kind: kind}
	for lo := 0; lo < len(t.Data); lo += chunkBytes {
		s.chunk++
		c := s.chunk
		meta := call.meta(c)
		if err := f(lo, min(lo+chunkBytes, len(t.Data)), c, int(c%shmSlots), meta[:]); err != nil {
			return err
		}
	}
	return nil
}

// shmCheckMeta fails with pg.ErrMismatch, naming peer, unless the chunk
// in peer's slot is the one this rank expects (meta). It only compares:
// nothing read from the peer is used as a length or an offset.
func (g *Group) shmCheckMeta(r *run, peer, slot int, meta []byte) error {
	pm := g.shm.meta(peer, slot)
	if string(pm) == string(meta) {
		return nil
	}
	return g.shmMismatch(r, peer, pm, meta)
}
