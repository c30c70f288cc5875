package tcp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// Layout of a rank's shared-memory segment: a header page of control
// words, then two data slots that alternate between consecutive chunks,
// so that copying chunk c+1 in overlaps the peers copying chunk c out.
//
// Nothing read from a peer's segment is ever used as an offset or a
// length: every offset is computed from this rank's own tensor, and the
// only values read back (the three progress counters and the chunk's
// metadata) are compared, never indexed with. A buggy peer that writes
// garbage can therefore make a collective fail (the metadata check
// reports pg.ErrMismatch) or time out, but never make this rank read or
// write outside a mapping.
const (
	shmHeader    = 4096
	shmSlotBytes = 4 << 20
	shmSlots     = 2
	shmSegBytes  = shmHeader + shmSlots*shmSlotBytes

	offArrive  = 0   // chunks whose input this rank has copied in
	offReduced = 64  // chunks whose shard this rank has reduced
	offDone    = 128 // chunks this rank has copied out (its slots may be reused)
	offMeta    = 256 // per slot, 64 bytes: the chunk's shmCall (op, size, dtype, reduce kind, root) and number
	metaStride = 64
)

// shmWorld is a group's shared-memory transport: every rank's segment,
// mapped into this process. Only groups whose ranks all share this host
// have one.
type shmWorld struct {
	segs    [][]byte // by rank; segs[me] is this rank's own, nil for ranks on other hosts
	members []int    // the ranks whose segments are mapped, ascending, this rank included
	chunk   uint32   // the chunks this world has run so far (the same on every member)
	unmap   func()
}

// full reports whether every rank of the group is a member, so that a
// collective can run entirely through shared memory.
func (s *shmWorld) full() bool { return len(s.members) == len(s.segs) }

func (s *shmWorld) word(rank, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&s.segs[rank][off]))
}

func (s *shmWorld) slot(rank, slot int) []byte {
	b := shmHeader + slot*shmSlotBytes
	return s.segs[rank][b : b+shmSlotBytes : b+shmSlotBytes]
}

func (s *shmWorld) meta(rank, slot int) []byte {
	b := offMeta + slot*metaStride
	return s.segs[rank][b : b+metaStride : b+metaStride]
}

// publish stores v in this rank's counter at off and wakes its waiters.
func (s *shmWorld) publish(me, off int, v uint32) {
	w := s.word(me, off)
	atomic.StoreUint32(w, v)
	futexWake(w)
}

// reached reports whether counter v has reached c (modulo 2^32).
func reached(v, c uint32) bool { return int32(v-c) >= 0 }

// shmAllReduce reduces t through the segments: per chunk, each rank
// copies the peers' shards of its input into its own slot, reduces its
// own shard straight from every rank's slot and its own tensor (in rank
// order, as pg/local does, so every rank gets the same bits) into both its
// tensor and its slot, and copies the peers' reduced shards out.
func (g *Group) shmAllReduce(r *run, t pg.Tensor, op pg.ReduceOp) error {
	s, n, me := g.shm, g.size, g.rank
	kind := kernel.BaseKind(op)
	es := t.Dtype.Size()
	chunkBytes := shmSlotBytes / es * es
	kernel.Prepare(t, op, n)
	call := shmCall{op: pg.OpAllReduce, bytes: len(t.Data), dtype: t.Dtype, kind: kind}
	ins := make([]pg.Tensor, n)
	for lo := 0; lo < len(t.Data); lo += chunkBytes {
		hi := min(lo+chunkBytes, len(t.Data))
		// The peers must have copied out the chunk this slot last held.
		c, slot, err := g.shmNext(r)
		if err != nil {
			return err
		}
		shard := shardsOf(hi-lo, es, n)
		// The peers' shards of this rank's input go into its slot; its
		// own shard is reduced straight from t.
		mine := s.slot(me, slot)
		for j := range n {
			if a, b := shard(j); j != me {
				copy(mine[a:b], t.Data[lo+a:lo+b])
			}
		}
		if err := g.shmArrive(r, c, slot, call); err != nil {
			return err
		}
		if a, b := shard(me); b > a {
			own := pg.Tensor{Dtype: t.Dtype, Data: t.Data[lo+a : lo+b]}
			for j := range n {
				ins[j] = pg.Tensor{Dtype: t.Dtype, Data: s.slot(j, slot)[a:b]}
			}
			ins[me] = own
			// The result goes to t and to the slot, where the peers copy
			// it from.
			kernel.ReduceN([]pg.Tensor{{Dtype: t.Dtype, Data: mine[a:b]}, own}, ins, kind)
		}
		s.publish(me, offReduced, c)
		if err := g.shmWaitAll(r, offReduced, c); err != nil {
			return err
		}
		for j := range n {
			if a, b := shard(j); j != me {
				copy(t.Data[lo+a:lo+b], s.slot(j, slot)[a:b])
			}
		}
		s.publish(me, offDone, c)
	}
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

// shmWaitAll waits until every peer's counter at off has reached c.
func (g *Group) shmWaitAll(r *run, off int, c uint32) error {
	for j := range g.size {
		if j == g.rank {
			continue
		}
		if err := g.shmWait(r, j, off, c); err != nil {
			return err
		}
	}
	return nil
}

// shmWait waits until peer's counter at off reaches c: a short spin, then
// futex waits of at most shmPoll, between which it checks, as every wait
// of a collective does, the peer's control connection, the deadline, the
// caller's ctx and the group's failure.
func (g *Group) shmWait(r *run, peer, off int, c uint32) error {
	w := g.shm.word(peer, off)
	for range shmSpin {
		if reached(atomic.LoadUint32(w), c) {
			return nil
		}
	}
	for {
		v := atomic.LoadUint32(w)
		if reached(v, c) {
			return nil
		}
		if err := r.poll(peer); err != nil {
			return err
		}
		futexWait(w, v, shmPoll)
	}
}

// poll is block's checks without waiting: the collective's error if it
// cannot go on.
func (r *run) poll(peer int) error {
	// The caller's ctx first: its end also aborts the group (executor.go),
	// and the caller must see its own cause, not the abort it triggered.
	select {
	case <-r.ctxDone:
		return r.g.ctxErr(r.op, r.ctx)
	default:
	}
	select {
	case <-r.timer.C:
		return r.errf(peer, pg.ErrTimeout, fmt.Errorf("collective #%d made no progress with rank %d over shared memory before its deadline (group timeout %v)", r.seq+1, peer, r.g.opts.Timeout))
	case <-r.ctxDone:
		return r.g.ctxErr(r.op, r.ctx)
	case <-r.g.failed:
		return r.g.failure.Load().errorFor(r.op, r.g.rank)
	default:
	}
	l := r.g.links[peer]
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return r.linkErr(l, err)
	}
	return nil
}
