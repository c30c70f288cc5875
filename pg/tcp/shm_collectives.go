package tcp

import (
	"encoding/binary"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// Broadcast, AllGather, ReduceScatter, Reduce, Gather, Scatter and
// AllToAll through the segments (AllReduce is in shm.go). Each runs as a sequence of chunks of the
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

// meta is the call as it sits in a slot's metadata, for chunk c. Every
// shared-memory path, AllReduce's included, writes it, so ranks in
// different collectives are caught whichever two meet.
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
	case pg.OpBroadcast, pg.OpScatter:
		s += fmt.Sprintf(" from root %d", m.root)
	case pg.OpGather:
		s += fmt.Sprintf(" to root %d", m.root)
	case pg.OpAllToAll: // its sizes differ by rank; shmAllToAll checks them
		s = fmt.Sprintf("%v of %v", m.op, m.dtype)
	case pg.OpReduceScatter:
		s += fmt.Sprintf(" (%v)", m.kind)
	case pg.OpReduce:
		s += fmt.Sprintf(" (%v) to root %d", m.kind, m.root)
	}
	return s
}

// shmCallOf decodes a peer's metadata, only to say how it differs.
func shmCallOf(b []byte) (shmCall, uint32) {
	m := shmCall{
		bytes: int(binary.LittleEndian.Uint64(b[0:]) & (1<<62 - 1)),
		dtype: pg.Dtype(binary.LittleEndian.Uint32(b[8:])),
		kind:  pg.ReduceKind(binary.LittleEndian.Uint32(b[12:])),
		op:    pg.OpType(binary.LittleEndian.Uint32(b[20:])),
		root:  int(int32(binary.LittleEndian.Uint32(b[24:]))),
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
			return g.shmMismatch(r, j, pm, meta[:])
		}
	}
	return nil
}

// shmMismatch is the error for peer's chunk metadata pm differing from
// this rank's, mine: both calls described, the peer named.
func (g *Group) shmMismatch(r *run, peer int, pm, mine []byte) error {
	theirs, tc := shmCallOf(pm)
	ours, c := shmCallOf(mine)
	return r.errf(peer, pg.ErrMismatch, fmt.Errorf("rank %d issued %v as shared-memory chunk %d where this rank issued %v (chunk %d): ranks must issue the same collectives in the same order, with the same sizes, dtypes, ops and roots",
		peer, theirs, tc, ours, c))
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
		shard := shardsOf(hi-lo, es, n)
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

// shmMaxPieces is the largest group whose Scatter and AllToAll go
// through the segments: those cut a slot into one piece per rank, and
// pieces of less than 4 KiB are not worth it (every rank of every group
// agrees on this, since it depends on the group's size alone).
const shmMaxPieces = shmSlotBytes / 4096

// shmPiece is the size of each of n pieces of a slot that keeps its last
// reserved bytes: a multiple of 64, so that pieces start on cache lines.
func shmPiece(n, reserved int) int { return (shmSlotBytes - reserved) / n &^ 63 }

// shmGather: per chunk of up to a slot of the input, every rank but root
// copies its chunk into its slot, and root copies every peer's out of
// their slots into their segments of out (its own it copies straight
// from in). At least one chunk runs, even for empty inputs, so that
// ranks that disagree on the length fail with pg.ErrMismatch, as over TCP.
func (g *Group) shmGather(r *run, out, in pg.Tensor, root int) error {
	s, me := g.shm, g.rank
	per := len(in.Data) // bytes per rank
	call := shmCall{op: pg.OpGather, bytes: per, dtype: in.Dtype, root: root}
	if me == root {
		copy(out.Data[me*per:(me+1)*per], in.Data)
	}
	for lo := 0; lo < max(per, 1); lo += shmSlotBytes {
		hi := min(lo+shmSlotBytes, per)
		c, slot, err := g.shmNext(r)
		if err != nil {
			return err
		}
		if me != root {
			copy(s.slot(me, slot), in.Data[lo:hi])
		}
		if err := g.shmArrive(r, c, slot, call); err != nil {
			return err
		}
		if me == root {
			for j := range g.size {
				if j != me {
					copy(out.Data[j*per+lo:j*per+hi], s.slot(j, slot))
				}
			}
		}
		s.publish(me, offDone, c)
	}
	return nil
}

// shmScatter: root's slot holds one piece per rank; per chunk [lo, hi)
// of every rank's segment, of up to a piece, root copies segment j's
// into piece j of its slot, and rank j copies piece j of root's slot
// into its out (root copies its own segment straight from in). At least
// one chunk runs, even for empty outputs, as in shmGather.
func (g *Group) shmScatter(r *run, out, in pg.Tensor, root int) error {
	s, n, me := g.shm, g.size, g.rank
	seg := len(out.Data)
	step := shmPiece(n, 0)
	call := shmCall{op: pg.OpScatter, bytes: seg, dtype: out.Dtype, root: root}
	if me == root {
		copy(out.Data, in.Data[me*seg:(me+1)*seg])
	}
	for lo := 0; lo < max(seg, 1); lo += step {
		hi := min(lo+step, seg)
		c, slot, err := g.shmNext(r)
		if err != nil {
			return err
		}
		if me == root {
			mine := s.slot(me, slot)
			for j := range n {
				if j != me {
					copy(mine[j*step:j*step+hi-lo], in.Data[j*seg+lo:j*seg+hi])
				}
			}
		}
		if err := g.shmArrive(r, c, slot, call); err != nil {
			return err
		}
		if me != root {
			copy(out.Data[lo:hi], s.slot(root, slot)[me*step:me*step+hi-lo])
		}
		s.publish(me, offDone, c)
	}
	return nil
}

// shmAllToAll: chunk j of in goes to rank j, chunks may be uneven and
// empty. Every slot holds one piece per rank, then a tail of n+1 words;
// chunk k of the collective moves bytes [k*step, (k+1)*step) of every
// rank's chunk for every other rank: each rank copies those of its
// chunk for rank j into piece j of its slot, and those of its chunk of
// out from rank i out of piece me of rank i's slot.
//
// How many chunks that takes depends on the largest chunk of any rank,
// which no rank knows alone. So with the first chunk every rank also
// publishes, in its tail, how many bytes it sends to each rank and the
// largest of them; every rank checks that what each peer says it sends
// this rank is what this rank's output split expects (pg.ErrMismatch
// naming the peer; as over TCP, the receiver checks), and all run as
// many chunks as the largest needs. That count is the only value used
// from a peer's segment, and it is no offset or length: every piece is
// cut from this rank's own splits, so a peer that lies about it only
// adds empty chunks. At least one chunk runs, so splits are checked even
// when every chunk is empty.
func (g *Group) shmAllToAll(r *run, out, in pg.Tensor, outS, inS []int) error {
	s, n, me := g.shm, g.size, g.rank
	es := in.Dtype.Size()
	outOff, inOff := offsets(outS), offsets(inS)
	chunkOf := func(t pg.Tensor, off []int, j int) []byte { return t.Data[off[j]*es : off[j+1]*es] }
	copy(chunkOf(out, outOff, me), chunkOf(in, inOff, me))
	step := shmPiece(n, 8*(n+1))
	tail := n * step
	call := shmCall{op: pg.OpAllToAll, dtype: in.Dtype}
	largest := 0
	for j := range n {
		if j != me {
			largest = max(largest, len(chunkOf(in, inOff, j)))
		}
	}
	chunks := 1
	for k := 0; k < chunks; k++ {
		lo := k * step
		piece := func(b []byte) []byte { return b[min(lo, len(b)):min(lo+step, len(b))] }
		c, slot, err := g.shmNext(r)
		if err != nil {
			return err
		}
		mine := s.slot(me, slot)
		for j := range n {
			if j != me {
				copy(mine[j*step:], piece(chunkOf(in, inOff, j)))
			}
		}
		if k == 0 {
			for j := range n {
				binary.LittleEndian.PutUint64(mine[tail+8*j:], uint64(len(chunkOf(in, inOff, j))))
			}
			binary.LittleEndian.PutUint64(mine[tail+8*n:], uint64(largest))
		}
		if err := g.shmArrive(r, c, slot, call); err != nil {
			return err
		}
		if k == 0 {
			most := uint64(largest)
			for i := range n {
				if i == me {
					continue
				}
				words := s.slot(i, slot)[tail:]
				got := binary.LittleEndian.Uint64(words[8*me:])
				if want := uint64(outS[i] * es); got != want {
					return r.errf(i, pg.ErrMismatch, fmt.Errorf(
						"%w: rank %d sends %d bytes (%d %v elements) to this rank, but this rank's output split for it is %d elements: output split i on rank j must equal input split j on rank i",
						pg.ErrInvalidArgument, i, got, got/uint64(es), out.Dtype, outS[i]))
				}
				theirs := binary.LittleEndian.Uint64(words[8*n:])
				if theirs > 1<<50 {
					return r.errf(i, pg.ErrMismatch, fmt.Errorf("rank %d's shared-memory alltoall claims a chunk of %d bytes", i, theirs))
				}
				most = max(most, theirs)
			}
			chunks = max(1, int((most+uint64(step)-1)/uint64(step)))
		}
		for i := range n {
			if i != me {
				copy(piece(chunkOf(out, outOff, i)), s.slot(i, slot)[me*step:])
			}
		}
		s.publish(me, offDone, c)
	}
	return nil
}
