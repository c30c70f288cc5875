package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// The collectives through the segments. Each runs as a sequence of
// chunks of the world's chunk counter, in the same three steps:
//
//	c, slot := next chunk        wait until every peer is done with what slot last held
//	write this rank's part of c into its slot, publish "arrived c" and the call
//	wait until every peer has arrived at c; check that their calls are this rank's
//	read what this rank needs straight from the peers' slots
//	publish "done with c"
//
// so that, with two slots per rank, a rank writes chunk c+1 while its
// peers still read chunk c. Every offset and length comes from this
// rank's own tensors; what is read back from a peer's segment is only
// compared, but for where an AllReduce's tensor lies in the peer's arena,
// which is checked (Note [buffers peers read in place]). They need a Full
// world: every rank of the group a member.

// AllReduce reduces t through the segments: per chunk, each rank
// copies the peers' shards of its input into its own slot, reduces its
// own shard straight from every rank's slot and its own tensor (in rank
// order, as pg/local does, so every rank gets the same bits) into both its
// tensor and its slot, and copies the peers' reduced shards out. When
// every rank's tensor lies in its arena, the ranks read each other's
// tensors in place instead: Note [buffers peers read in place].
func (w *World) AllReduce(r Run, t pg.Tensor, op pg.ReduceOp) error {
	if len(t.Data) <= SmallAllReduceBytes {
		return w.allReduceSmall(r, t, op)
	}
	n, me := len(w.segs), w.me
	kind := kernel.BaseKind(op)
	es := t.Dtype.Size()
	chunkBytes := SlotBytes / es * es
	kernel.Prepare(t, op, n)
	call := Call{Op: pg.OpAllReduce, Bytes: len(t.Data), Dtype: t.Dtype, Kind: kind}
	place, inArena := w.ownOffset(t.Data, es)
	var tensors [][]byte // in place: every rank's tensor, decided at the first chunk
	ins := make([]pg.Tensor, n)
	for lo := 0; lo < len(t.Data); lo += chunkBytes {
		hi := min(lo+chunkBytes, len(t.Data))
		// The peers must have copied out the chunk this slot last held.
		c, slot, err := w.next(r)
		if err != nil {
			return err
		}
		shard := shardsOf(hi-lo, es, n)
		// The peers' shards of this rank's input go into its slot; its
		// own shard is reduced straight from t.
		mine := w.slot(me, slot)
		copyIn := func() {
			for j := range n {
				if a, b := shard(j); j != me {
					copy(mine[a:b], t.Data[lo+a:lo+b])
				}
			}
		}
		meta := call.Meta(c)
		first := lo == 0
		if first && inArena {
			// Where t lies instead of its copy: decide below.
			binary.LittleEndian.PutUint64(meta[OffMetaPlace:], uint64(place)+1)
		} else {
			copyIn()
		}
		if err := w.arriveWith(r, c, slot, meta); err != nil {
			return err
		}
		if first {
			if tensors, err = w.decide(r, c, slot, t, inArena, copyIn); err != nil {
				return err
			}
		}
		if tensors != nil { // the whole tensor at once, no more chunks
			if err := w.allReduceInPlace(r, c, t, tensors, kind); err != nil {
				return err
			}
			break
		}
		if a, b := shard(me); b > a {
			own := pg.Tensor{Dtype: t.Dtype, Data: t.Data[lo+a : lo+b]}
			for j := range n {
				ins[j] = pg.Tensor{Dtype: t.Dtype, Data: w.slot(j, slot)[a:b]}
			}
			ins[me] = own
			// The result goes to t and to the slot, where the peers copy
			// it from.
			w.scratch.ReduceN([]pg.Tensor{{Dtype: t.Dtype, Data: mine[a:b]}, own}, ins, kind)
		}
		w.publish(OffReduced, c)
		if err := w.waitAll(r, OffReduced, c); err != nil {
			return err
		}
		for j := range n {
			if a, b := shard(j); j != me {
				copy(t.Data[lo+a:lo+b], w.slot(j, slot)[a:b])
			}
		}
		w.publish(OffDone, c)
	}
	kernel.Finish(t, op, n)
	return nil
}

// allReduceInPlace is AllReduce once every rank has arrived at chunk c
// with its tensor in its arena: as pg/local does, each rank reduces its
// shard of the whole tensor straight from every rank's tensor (in rank
// order, so the bits are those of the slots' path) into every rank's
// tensor, then waits until every peer is done writing into this rank's.
// The shards are disjoint, so no rank waits for another in between.
func (w *World) allReduceInPlace(r Run, c uint32, t pg.Tensor, tensors [][]byte, kind pg.ReduceKind) error {
	a, b := shardsOf(len(t.Data), t.Dtype.Size(), len(tensors))(w.me)
	if b > a {
		parts := make([]pg.Tensor, len(tensors))
		for j := range tensors {
			parts[j] = pg.Tensor{Dtype: t.Dtype, Data: tensors[j][a:b]}
		}
		w.scratch.ReduceN(parts, parts, kind)
	}
	w.publish(OffDone, c)
	w.inPlace.Add(1)
	return w.waitAll(r, OffDone, c)
}

// decide chooses, at an AllReduce's first chunk c, once every rank has
// arrived with where its tensor lies, how the collective runs (Note
// [buffers peers read in place]): in place when every rank's tensor lies
// in its arena (it returns them, checked), through the slots otherwise.
// In a mixed world the ranks that did not copy their first chunk in
// (copyIn) do so now, and every rank waits for every peer's.
func (w *World) decide(r Run, c uint32, slot int, t pg.Tensor, inArena bool, copyIn func()) ([][]byte, error) {
	all, some := inArena, inArena
	for _, j := range w.members {
		if j != w.me {
			p := w.placeOf(j, slot)
			all, some = all && p != 0, some || p != 0
		}
	}
	if all {
		tensors := make([][]byte, len(w.segs))
		for j := range w.segs {
			if j == w.me {
				tensors[j] = t.Data
				continue
			}
			off := int(min(w.placeOf(j, slot), 1<<62)) - 1
			b, ok := w.peerTensor(j, off, len(t.Data), t.Dtype.Size())
			if !ok {
				return nil, r.Fail(j, pg.ErrMismatch, fmt.Errorf("rank %d published its tensor of %d bytes at offset %d of its "+
					"%d-byte shared-memory arena, which does not hold it: its segment is corrupt",
					j, len(t.Data), off, len(w.arenaOf(j))))
			}
			tensors[j] = b
		}
		return tensors, nil
	}
	if !some {
		return nil, nil
	}
	if inArena {
		copyIn()
	}
	w.publish(OffCopied, c)
	return nil, w.waitAll(r, OffCopied, c)
}

// placeOf is where peer published, with its chunk in slot, that its
// tensor lies in its arena, plus one; 0 when it does not.
func (w *World) placeOf(peer, slot int) uint64 {
	return binary.LittleEndian.Uint64(w.meta(peer, slot)[OffMetaPlace:])
}

// SmallAllReduceBytes is the largest AllReduce that allReduceSmall runs.
const SmallAllReduceBytes = 16 << 10

// allReduceSmall is AllReduce for a tensor of at most
// SmallAllReduceBytes: every rank copies its whole input into its slot
// and, once all have arrived, folds every rank's slot itself, in rank
// order, as the sharded path's owner of each element does, so the bits
// are the same on every rank and the same as the sharded path's. It reads
// n times the tensor instead of once, which costs nothing at this size,
// and saves the sharded path's second round (waiting for every shard to
// be reduced) and its copy out.
func (w *World) allReduceSmall(r Run, t pg.Tensor, op pg.ReduceOp) error {
	n, me := len(w.segs), w.me
	kind := kernel.BaseKind(op)
	kernel.Prepare(t, op, n)
	call := Call{Op: pg.OpAllReduce, Bytes: len(t.Data), Dtype: t.Dtype, Kind: kind}
	c, slot, err := w.next(r)
	if err != nil {
		return err
	}
	copy(w.slot(me, slot), t.Data)
	if err := w.arrive(r, c, slot, call); err != nil {
		return err
	}
	ins := make([]pg.Tensor, n)
	for j := range n {
		ins[j] = pg.Tensor{Dtype: t.Dtype, Data: w.slot(j, slot)[:len(t.Data)]}
	}
	w.scratch.ReduceN([]pg.Tensor{t}, ins, kind)
	w.publish(OffDone, c)
	kernel.Finish(t, op, n)
	return nil
}

// shardsOf splits a chunk of size bytes of es-byte elements into n
// shards of whole elements, the last ones shorter or empty: shard j is
// bytes [a, b) of the chunk.
func shardsOf(size, es, n int) func(j int) (a, b int) {
	elems := size / es
	per := (elems + n - 1) / n
	return func(j int) (int, int) { return min(j*per, elems) * es, min((j+1)*per, elems) * es }
}

// Broadcast: per chunk of up to a slot, root copies its chunk of t
// into its slot, and every other rank copies it out of root's.
func (w *World) Broadcast(r Run, t pg.Tensor, root int) error {
	me := w.me
	call := Call{Op: pg.OpBroadcast, Bytes: len(t.Data), Dtype: t.Dtype, Root: root}
	for lo := 0; lo < len(t.Data); lo += SlotBytes {
		hi := min(lo+SlotBytes, len(t.Data))
		c, slot, err := w.next(r)
		if err != nil {
			return err
		}
		if me == root {
			copy(w.slot(me, slot), t.Data[lo:hi])
		}
		if err := w.arrive(r, c, slot, call); err != nil {
			return err
		}
		if me != root {
			copy(t.Data[lo:hi], w.slot(root, slot))
		}
		w.publish(OffDone, c)
	}
	return nil
}

// AllGather: per chunk of up to a slot of the input, every rank
// copies its chunk into its slot, then copies every rank's chunk, its own
// included, out of the slots into its segment of out (so that an input
// that aliases out is read before it is overwritten).
func (w *World) AllGather(r Run, out, in pg.Tensor) error {
	me := w.me
	per := len(in.Data) // bytes per rank
	call := Call{Op: pg.OpAllGather, Bytes: per, Dtype: in.Dtype}
	for lo := 0; lo < per; lo += SlotBytes {
		hi := min(lo+SlotBytes, per)
		c, slot, err := w.next(r)
		if err != nil {
			return err
		}
		copy(w.slot(me, slot), in.Data[lo:hi])
		if err := w.arrive(r, c, slot, call); err != nil {
			return err
		}
		for j := range len(w.segs) {
			copy(out.Data[j*per+lo:j*per+hi], w.slot(j, slot))
		}
		w.publish(OffDone, c)
	}
	return nil
}

// ReduceScatter: in holds n segments of len(out) bytes. Per chunk,
// [lo, hi) of every segment: every rank copies chunk j of its input (its
// own too if op scales it) into piece j of its slot, scaled for AVG and
// PREMUL_SUM, then reduces piece me of every rank's slot, in rank order
// as pg/local does, straight into out.
func (w *World) ReduceScatter(r Run, out, in pg.Tensor, op pg.ReduceOp) error {
	n, me := len(w.segs), w.me
	es := in.Dtype.Size()
	seg := len(out.Data)
	step := SlotBytes / n / es * es       // a piece: a slot holds n of them
	scaled := kernel.Scales(op, in.Dtype) // the caller's input must stay as it was
	call := Call{Op: pg.OpReduceScatter, Bytes: seg, Dtype: in.Dtype, Kind: op.Kind}
	ins := make([]pg.Tensor, n)
	for lo := 0; lo < seg; lo += step {
		hi := min(lo+step, seg)
		c, slot, err := w.next(r)
		if err != nil {
			return err
		}
		piece := func(j int) []byte { return w.slot(j, slot)[me*step : me*step+hi-lo] }
		mine := w.slot(me, slot)
		for j := range n {
			if j != me || scaled {
				p := mine[j*step : j*step+hi-lo]
				copy(p, in.Data[j*seg+lo:j*seg+hi])
				kernel.Prepare(pg.Tensor{Dtype: in.Dtype, Data: p}, op, n)
			}
		}
		if err := w.arrive(r, c, slot, call); err != nil {
			return err
		}
		for j := range n {
			ins[j] = pg.Tensor{Dtype: in.Dtype, Data: piece(j)}
		}
		if !scaled {
			ins[me] = pg.Tensor{Dtype: in.Dtype, Data: in.Data[me*seg+lo : me*seg+hi]}
		}
		w.scratch.ReduceN([]pg.Tensor{{Dtype: out.Dtype, Data: out.Data[lo:hi]}}, ins, kernel.BaseKind(op))
		w.publish(OffDone, c)
	}
	kernel.Finish(out, op, n)
	return nil
}

// Reduce is AllReduce without the copy back to every rank: per
// chunk, every rank copies the peers' shards of its input into its slot
// (and its own, if op scales it, since only root's t may change), reduces
// its own shard straight from every rank's slot in rank order into its
// slot (root: into t), and root copies the peers' reduced shards out.
func (w *World) Reduce(r Run, t pg.Tensor, root int, op pg.ReduceOp) error {
	n, me := len(w.segs), w.me
	es := t.Dtype.Size()
	chunkBytes := SlotBytes / es * es
	scaled := me != root && kernel.Scales(op, t.Dtype)
	if me == root {
		kernel.Prepare(t, op, n)
	}
	call := Call{Op: pg.OpReduce, Bytes: len(t.Data), Dtype: t.Dtype, Kind: op.Kind, Root: root}
	ins := make([]pg.Tensor, n)
	for lo := 0; lo < len(t.Data); lo += chunkBytes {
		hi := min(lo+chunkBytes, len(t.Data))
		c, slot, err := w.next(r)
		if err != nil {
			return err
		}
		shard := shardsOf(hi-lo, es, n)
		mine := w.slot(me, slot)
		for j := range n {
			if a, b := shard(j); j != me || scaled {
				copy(mine[a:b], t.Data[lo+a:lo+b])
				if scaled {
					kernel.Prepare(pg.Tensor{Dtype: t.Dtype, Data: mine[a:b]}, op, n)
				}
			}
		}
		if err := w.arrive(r, c, slot, call); err != nil {
			return err
		}
		if a, b := shard(me); b > a {
			for j := range n {
				ins[j] = pg.Tensor{Dtype: t.Dtype, Data: w.slot(j, slot)[a:b]}
			}
			res := pg.Tensor{Dtype: t.Dtype, Data: mine[a:b]}
			if !scaled {
				ins[me] = pg.Tensor{Dtype: t.Dtype, Data: t.Data[lo+a : lo+b]}
			}
			if me == root {
				res = ins[me]
			}
			w.scratch.ReduceN([]pg.Tensor{res}, ins, kernel.BaseKind(op))
		}
		w.publish(OffReduced, c)
		if me == root {
			if err := w.waitAll(r, OffReduced, c); err != nil {
				return err
			}
			for j := range n {
				if a, b := shard(j); j != me {
					copy(t.Data[lo+a:lo+b], w.slot(j, slot)[a:b])
				}
			}
		}
		w.publish(OffDone, c)
	}
	if me == root {
		kernel.Finish(t, op, n)
	}
	return nil
}

// Barrier is one chunk with no data: every rank arrives with the call,
// waits until every peer has arrived, checks their calls and is done. A
// rank leaves only once all have arrived; none writes a slot.
func (w *World) Barrier(r Run) error {
	c, slot, err := w.next(r)
	if err != nil {
		return err
	}
	if err := w.arrive(r, c, slot, Call{Op: pg.OpBarrier}); err != nil {
		return err
	}
	w.publish(OffDone, c)
	return nil
}
