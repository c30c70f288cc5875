package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// Broadcast, AllGather, ReduceScatter and Reduce through the segments
// (AllReduce is in shm.go). Each runs as a sequence of chunks of the
// world's chunk counter, in the same three steps:
//
//	c, slot := next chunk        wait until every peer is done with what slot last held
//	write this rank's part of c into its slot, publish "arrived c" and the call
//	wait until every peer has arrived at c; check that their calls are this rank's
//	read what this rank needs straight from the peers' slots
//	publish "done with c"
//
// so that, with two slots per rank, a rank writes chunk c+1 while its
// peers still read chunk c. As in shmAllReduce, every offset and length
// comes from this rank's own tensors; what is read back from a peer's
// segment is only compared.

// shmCall describes a collective to the peers: every rank publishes it
// with each chunk, and every rank compares each peer's with its own, so
// that ranks that issued different collectives, or one collective with
// different sizes, dtypes, ops or roots, fail with pg.ErrMismatch naming
// the peer instead of reading each other's garbage.
type shmCall struct {
	op    pg.OpType
	bytes int // the length that decides the chunks: the tensor's, or one rank's part
	dtype pg.Dtype
	kind  pg.ReduceKind
	root  int
}

// meta is the call as it sits in a slot's metadata, for chunk c. The
// first 20 bytes are laid out as shmAllReduce's, which leaves the op at
// zero, so an AllReduce facing any of these collectives is caught too.
func (m shmCall) meta(c uint32) (b [metaStride]byte) {
	binary.LittleEndian.PutUint64(b[0:], uint64(m.bytes))
	binary.LittleEndian.PutUint32(b[8:], uint32(m.dtype))
	binary.LittleEndian.PutUint32(b[12:], uint32(m.kind))
	binary.LittleEndian.PutUint32(b[16:], c)
	binary.LittleEndian.PutUint32(b[20:], uint32(m.op))
	binary.LittleEndian.PutUint32(b[24:], uint32(m.root))
	return b
}

// String describes the call for an error message.
func (m shmCall) String() string {
	s := fmt.Sprintf("%v of %d bytes of %v", m.op, m.bytes, m.dtype)
	switch m.op {
	case pg.OpBroadcast:
		s += fmt.Sprintf(" from root %d", m.root)
	case pg.OpReduceScatter:
		s += fmt.Sprintf(" (%v)", m.kind)
	case pg.OpReduce:
		s += fmt.Sprintf(" (%v) to root %d", m.kind, m.root)
	}
	return s
}

// shmCallOf decodes a peer's metadata, only to say how it differs (an
// op of zero is shmAllReduce's).
func shmCallOf(b []byte) (shmCall, uint32) {
	m := shmCall{
		bytes: int(binary.LittleEndian.Uint64(b[0:]) & (1<<62 - 1)),
		dtype: pg.Dtype(binary.LittleEndian.Uint32(b[8:])),
		kind:  pg.ReduceKind(binary.LittleEndian.Uint32(b[12:])),
		op:    pg.OpType(binary.LittleEndian.Uint32(b[20:])),
		root:  int(int32(binary.LittleEndian.Uint32(b[24:]))),
	}
	if m.op == 0 {
		m.op = pg.OpAllReduce
	}
	return m, binary.LittleEndian.Uint32(b[16:])
}

// shmNext starts the world's next chunk: it waits until every peer is
// done with the chunk this rank's slot last held, and returns the chunk's
// number and slot.
func (g *Group) shmNext(r *run) (uint32, int, error) {
	s := g.shm
	s.chunk++
	c := s.chunk
	if err := g.shmWaitAll(r, offDone, c-shmSlots); err != nil {
		return 0, 0, err
	}
	return c, int(c % shmSlots), nil
}

// shmArrive publishes that this rank's part of chunk c is in its slot,
// with the call, waits until every peer's is, and checks that every
// peer's call is this rank's.
func (g *Group) shmArrive(r *run, c uint32, slot int, call shmCall) error {
	s, me := g.shm, g.rank
	meta := call.meta(c)
	copy(s.meta(me, slot), meta[:])
	s.publish(me, offArrive, c)
	if err := g.shmWaitAll(r, offArrive, c); err != nil {
		return err
	}
	for j := range g.size {
		if pm := s.meta(j, slot); j != me && string(pm) != string(meta[:]) {
			theirs, tc := shmCallOf(pm)
			return r.errf(j, pg.ErrMismatch, fmt.Errorf("rank %d's shared-memory chunk %d is a %v, this rank's chunk %d is a %v: ranks must issue the same collectives in the same order, with the same sizes, dtypes, ops and roots",
				j, tc, theirs, c, call))
		}
	}
	return nil
}

// shmBroadcast: per chunk of up to a slot, root copies its chunk of t
// into its slot, and every other rank copies it out of root's.
func (g *Group) shmBroadcast(r *run, t pg.Tensor, root int) error {
	s, me := g.shm, g.rank
	call := shmCall{op: pg.OpBroadcast, bytes: len(t.Data), dtype: t.Dtype, root: root}
	for lo := 0; lo < len(t.Data); lo += shmSlotBytes {
		hi := min(lo+shmSlotBytes, len(t.Data))
		c, slot, err := g.shmNext(r)
		if err != nil {
			return err
		}
		if me == root {
			copy(s.slot(me, slot), t.Data[lo:hi])
		}
		if err := g.shmArrive(r, c, slot, call); err != nil {
			return err
		}
		if me != root {
			copy(t.Data[lo:hi], s.slot(root, slot))
		}
		s.publish(me, offDone, c)
	}
	return nil
}

// shmAllGather: per chunk of up to a slot of the input, every rank
// copies its chunk into its slot, then copies every rank's chunk, its own
// included, out of the slots into its segment of out (so that an input
// that aliases out is read before it is overwritten).
func (g *Group) shmAllGather(r *run, out, in pg.Tensor) error {
	s, me := g.shm, g.rank
	per := len(in.Data) // bytes per rank
	call := shmCall{op: pg.OpAllGather, bytes: per, dtype: in.Dtype}
	for lo := 0; lo < per; lo += shmSlotBytes {
		hi := min(lo+shmSlotBytes, per)
		c, slot, err := g.shmNext(r)
		if err != nil {
			return err
		}
		copy(s.slot(me, slot), in.Data[lo:hi])
		if err := g.shmArrive(r, c, slot, call); err != nil {
			return err
		}
		for j := range g.size {
			copy(out.Data[j*per+lo:j*per+hi], s.slot(j, slot))
		}
		s.publish(me, offDone, c)
	}
	return nil
}

// shmReduceScatter: in holds n segments of len(out) bytes. Per chunk,
// [lo, hi) of every segment: every rank copies chunk j of its input (its
// own too if op scales it) into piece j of its slot, scaled for AVG and
// PREMUL_SUM, then reduces piece me of every rank's slot, in rank order
// as pg/local does, straight into out.
func (g *Group) shmReduceScatter(r *run, out, in pg.Tensor, op pg.ReduceOp) error {
	s, n, me := g.shm, g.size, g.rank
	es := in.Dtype.Size()
	seg := len(out.Data)
	step := shmSlotBytes / n / es * es // a piece: a slot holds n of them
	scaled := scales(op, in.Dtype)     // the caller's input must stay as it was
	call := shmCall{op: pg.OpReduceScatter, bytes: seg, dtype: in.Dtype, kind: op.Kind}
	ins := make([]pg.Tensor, n)
	for lo := 0; lo < seg; lo += step {
		hi := min(lo+step, seg)
		c, slot, err := g.shmNext(r)
		if err != nil {
			return err
		}
		piece := func(j int) []byte { return s.slot(j, slot)[me*step : me*step+hi-lo] }
		mine := s.slot(me, slot)
		for j := range n {
			if j != me || scaled {
				p := mine[j*step : j*step+hi-lo]
				copy(p, in.Data[j*seg+lo:j*seg+hi])
				kernel.Prepare(pg.Tensor{Dtype: in.Dtype, Data: p}, op, n)
			}
		}
		if err := g.shmArrive(r, c, slot, call); err != nil {
			return err
		}
		for j := range n {
			ins[j] = pg.Tensor{Dtype: in.Dtype, Data: piece(j)}
		}
		if !scaled {
			ins[me] = pg.Tensor{Dtype: in.Dtype, Data: in.Data[me*seg+lo : me*seg+hi]}
		}
		kernel.ReduceN([]pg.Tensor{{Dtype: out.Dtype, Data: out.Data[lo:hi]}}, ins, kernel.BaseKind(op))
		s.publish(me, offDone, c)
	}
	kernel.Finish(out, op, n)
	return nil
}

// shmReduce is shmAllReduce without the copy back to every rank: per
// chunk, every rank copies the peers' shards of its input into its slot
// (and its own, if op scales it, since only root's t may change), reduces
// its own shard straight from every rank's slot in rank order into its
// slot (root: into t), and root copies the peers' reduced shards out.
func (g *Group) shmReduce(r *run, t pg.Tensor, root int, op pg.ReduceOp) error {
	s, n, me := g.shm, g.size, g.rank
	es := t.Dtype.Size()
	chunkBytes := shmSlotBytes / es * es
	scaled := me != root && scales(op, t.Dtype)
	if me == root {
		kernel.Prepare(t, op, n)
	}
	call := shmCall{op: pg.OpReduce, bytes: len(t.Data), dtype: t.Dtype, kind: op.Kind, root: root}
	ins := make([]pg.Tensor, n)
	for lo := 0; lo < len(t.Data); lo += chunkBytes {
		hi := min(lo+chunkBytes, len(t.Data))
		c, slot, err := g.shmNext(r)
		if err != nil {
			return err
		}
		elems := (hi - lo) / es
		per := (elems + n - 1) / n
		shard := func(j int) (int, int) { return min(j*per, elems) * es, min((j+1)*per, elems) * es }
		mine := s.slot(me, slot)
		for j := range n {
			if a, b := shard(j); j != me || scaled {
				copy(mine[a:b], t.Data[lo+a:lo+b])
				if scaled {
					kernel.Prepare(pg.Tensor{Dtype: t.Dtype, Data: mine[a:b]}, op, n)
				}
			}
		}
		if err := g.shmArrive(r, c, slot, call); err != nil {
			return err
		}
		if a, b := shard(me); b > a {
			for j := range n {
				ins[j] = pg.Tensor{Dtype: t.Dtype, Data: s.slot(j, slot)[a:b]}
			}
			res := pg.Tensor{Dtype: t.Dtype, Data: mine[a:b]}
			if !scaled {
				ins[me] = pg.Tensor{Dtype: t.Dtype, Data: t.Data[lo+a : lo+b]}
			}
			if me == root {
				res = ins[me]
			}
			kernel.ReduceN([]pg.Tensor{res}, ins, kernel.BaseKind(op))
		}
		s.publish(me, offReduced, c)
		if me == root {
			if err := g.shmWaitAll(r, offReduced, c); err != nil {
				return err
			}
			for j := range n {
				if a, b := shard(j); j != me {
					copy(t.Data[lo+a:lo+b], s.slot(j, slot)[a:b])
				}
			}
		}
		s.publish(me, offDone, c)
	}
	if me == root {
		kernel.Finish(t, op, n)
	}
	return nil
}
