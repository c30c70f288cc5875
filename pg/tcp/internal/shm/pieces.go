package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/goddp/ddp/pg"
)

// MaxPieces is the largest group whose Scatter and AllToAll go
// through the segments: those cut a slot into one piece per rank, and
// pieces of less than 4 KiB are not worth it (every rank of every group
// agrees on this, since it depends on the group's size alone).
const MaxPieces = SlotBytes / 4096

// Piece is the size of each of n pieces of a slot that keeps its last
// reserved bytes: a multiple of 64, so that pieces start on cache lines.
func Piece(n, reserved int) int { return (SlotBytes - reserved) / n &^ 63 }

// Gather: per chunk of up to a slot of the input, every rank but root
// copies its chunk into its slot, and root copies every peer's out of
// their slots into their segments of out (its own it copies straight
// from in). At least one chunk runs, even for empty inputs, so that
// ranks that disagree on the length fail with pg.ErrMismatch, as over TCP.
func (w *World) Gather(r Run, out, in pg.Tensor, root int) error {
	me := w.me
	per := len(in.Data) // bytes per rank
	call := Call{Op: pg.OpGather, Bytes: per, Dtype: in.Dtype, Root: root}
	if me == root {
		copy(out.Data[me*per:(me+1)*per], in.Data)
	}
	for lo := 0; lo < max(per, 1); lo += SlotBytes {
		hi := min(lo+SlotBytes, per)
		c, slot, err := w.next(r)
		if err != nil {
			return err
		}
		if me != root {
			copy(w.slot(me, slot), in.Data[lo:hi])
		}
		if err := w.arrive(r, c, slot, call); err != nil {
			return err
		}
		if me == root {
			for j := range len(w.segs) {
				if j != me {
					copy(out.Data[j*per+lo:j*per+hi], w.slot(j, slot))
				}
			}
		}
		w.publish(OffDone, c)
	}
	return nil
}

// Scatter: root's slot holds one piece per rank; per chunk [lo, hi)
// of every rank's segment, of up to a piece, root copies segment j's
// into piece j of its slot, and rank j copies piece j of root's slot
// into its out (root copies its own segment straight from in). At least
// one chunk runs, even for empty outputs, as in Gather.
func (w *World) Scatter(r Run, out, in pg.Tensor, root int) error {
	n, me := len(w.segs), w.me
	seg := len(out.Data)
	step := Piece(n, 0)
	call := Call{Op: pg.OpScatter, Bytes: seg, Dtype: out.Dtype, Root: root}
	if me == root {
		copy(out.Data, in.Data[me*seg:(me+1)*seg])
	}
	for lo := 0; lo < max(seg, 1); lo += step {
		hi := min(lo+step, seg)
		c, slot, err := w.next(r)
		if err != nil {
			return err
		}
		if me == root {
			mine := w.slot(me, slot)
			for j := range n {
				if j != me {
					copy(mine[j*step:j*step+hi-lo], in.Data[j*seg+lo:j*seg+hi])
				}
			}
		}
		if err := w.arrive(r, c, slot, call); err != nil {
			return err
		}
		if me != root {
			copy(out.Data[lo:hi], w.slot(root, slot)[me*step:me*step+hi-lo])
		}
		w.publish(OffDone, c)
	}
	return nil
}

// AllToAll: chunk j of in goes to rank j, chunks may be uneven and
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
func (w *World) AllToAll(r Run, out, in pg.Tensor, outS, inS []int) error {
	n, me := len(w.segs), w.me
	es := in.Dtype.Size()
	outOff, inOff := offsets(outS), offsets(inS)
	chunkOf := func(t pg.Tensor, off []int, j int) []byte { return t.Data[off[j]*es : off[j+1]*es] }
	copy(chunkOf(out, outOff, me), chunkOf(in, inOff, me))
	step := Piece(n, 8*(n+1))
	tail := n * step
	call := Call{Op: pg.OpAllToAll, Dtype: in.Dtype}
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
		c, slot, err := w.next(r)
		if err != nil {
			return err
		}
		mine := w.slot(me, slot)
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
		if err := w.arrive(r, c, slot, call); err != nil {
			return err
		}
		if k == 0 {
			most := uint64(largest)
			for i := range n {
				if i == me {
					continue
				}
				words := w.slot(i, slot)[tail:]
				got := binary.LittleEndian.Uint64(words[8*me:])
				if want := uint64(outS[i] * es); got != want {
					return r.Fail(i, pg.ErrMismatch, fmt.Errorf(
						"%w: rank %d sends %d bytes (%d %v elements) to this rank, but this rank's output split for it is %d elements: "+
							"output split i on rank j must equal input split j on rank i",
						pg.ErrInvalidArgument, i, got, got/uint64(es), out.Dtype, outS[i]))
				}
				theirs := binary.LittleEndian.Uint64(words[8*n:])
				if theirs > 1<<50 {
					return r.Fail(i, pg.ErrMismatch,
						fmt.Errorf("rank %d's shared-memory alltoall claims a chunk of %d bytes", i, theirs))
				}
				most = max(most, theirs)
			}
			chunks = max(1, int((most+uint64(step)-1)/uint64(step)))
		}
		for i := range n {
			if i != me {
				copy(piece(chunkOf(out, outOff, i)), w.slot(i, slot)[me*step:])
			}
		}
		w.publish(OffDone, c)
	}
	return nil
}

// offsets turns AllToAll's splits into the offsets of the chunks.
func offsets(splits []int) []int {
	off := make([]int, len(splits)+1)
	for i, s := range splits {
		off[i+1] = off[i] + s
	}
	return off
}
