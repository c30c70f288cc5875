package shm

import (
	"github.com/goddp/ddp/pg"
)

// Note [hierarchical slots]: in step 1 only the leader reads, from the
// members' slots; in step 3 only the members read, from the leader's. A
// rank writes a chunk into its slot once every rank that reads that slot
// has finished with the chunk it held before, two chunks earlier, which
// each says by publishing its done counter. Every member of the host runs
// every chunk of both steps, so the chunk numbers, and the slot each
// chunk uses, are the same on every member; each publishes done for
// every chunk (a chunk in which it reads nothing at once), so the
// counters a writer waits on never lag behind.

// ReduceToLeader is step 1 of the hierarchical AllReduce (pg/tcp): host's ranks reduce t
// into the leader's t.
func (w *World) ReduceToLeader(r Run, t pg.Tensor, kind pg.ReduceKind, host []int) error {
	me, leader := w.me, host[0]
	var ins []pg.Tensor
	if me == leader {
		ins = make([]pg.Tensor, len(host))
	}
	return w.chunks(t, kind, func(lo, hi int, c uint32, slot int, meta []byte) error {
		own := pg.Tensor{Dtype: t.Dtype, Data: t.Data[lo:hi]}
		if me != leader {
			if err := w.wait(r, leader, OffDone, c-Slots); err != nil {
				return err
			}
			copy(w.slot(me, slot), own.Data)
			copy(w.meta(me, slot), meta)
			w.publish(OffArrive, c)
			w.publish(OffDone, c)
			return nil
		}
		for i, j := range host {
			if j == me {
				ins[i] = own
				continue
			}
			if err := w.wait(r, j, OffArrive, c); err != nil {
				return err
			}
			if err := w.checkMeta(r, j, slot, meta); err != nil {
				return err
			}
			ins[i] = pg.Tensor{Dtype: t.Dtype, Data: w.slot(j, slot)[:hi-lo]}
		}
		w.scratch.ReduceN([]pg.Tensor{own}, ins, kind)
		w.publish(OffDone, c)
		return nil
	})
}

// BroadcastFromLeader is step 3 of the hierarchical AllReduce (pg/tcp): the leader's t goes
// to host's other ranks.
func (w *World) BroadcastFromLeader(r Run, t pg.Tensor, kind pg.ReduceKind, host []int) error {
	me, leader := w.me, host[0]
	return w.chunks(t, kind, func(lo, hi int, c uint32, slot int, meta []byte) error {
		if me == leader {
			for _, j := range host[1:] {
				if err := w.wait(r, j, OffDone, c-Slots); err != nil {
					return err
				}
			}
			copy(w.slot(me, slot), t.Data[lo:hi])
			copy(w.meta(me, slot), meta)
			w.publish(OffArrive, c)
			w.publish(OffDone, c)
			return nil
		}
		if err := w.wait(r, leader, OffArrive, c); err != nil {
			return err
		}
		if err := w.checkMeta(r, leader, slot, meta); err != nil {
			return err
		}
		copy(t.Data[lo:hi], w.slot(leader, slot))
		w.publish(OffDone, c)
		return nil
	})
}

// chunks calls f for each chunk of t that fits a slot, with its byte
// bounds, its number in the world's sequence, its slot and its metadata
// (an AllReduce's Call for that chunk).
func (w *World) chunks(t pg.Tensor, kind pg.ReduceKind,
	f func(lo, hi int, c uint32, slot int, meta []byte) error) error {
	es := t.Dtype.Size()
	chunkBytes := SlotBytes / es * es
	call := Call{Op: pg.OpAllReduce, Bytes: len(t.Data), Dtype: t.Dtype, Kind: kind}
	for lo := 0; lo < len(t.Data); lo += chunkBytes {
		w.chunk++
		c := w.chunk
		meta := call.Meta(c)
		if err := f(lo, min(lo+chunkBytes, len(t.Data)), c, int(c%Slots), meta[:]); err != nil {
			return err
		}
	}
	return nil
}
