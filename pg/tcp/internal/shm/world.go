package shm

import (
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// Layout of a rank's segment: a header page of control words, then two
// data slots that alternate between consecutive chunks, so that copying
// chunk c+1 in overlaps the peers copying chunk c out.
//
// Nothing read from a peer's segment is used as an offset or a length
// without a bounds check: every offset is computed from this rank's own
// tensor, and the values read back (the progress counters and the
// chunk's metadata) are compared, never indexed with, but for one: where
// a peer's tensor lies in its arena, checked to lie inside it (Note
// [buffers peers read in place]). A buggy peer that writes
// garbage can therefore make a collective fail (the metadata check
// reports pg.ErrMismatch) or time out, but never make this rank read or
// write outside a mapping.
const (
	HeaderBytes = 4096
	SlotBytes   = 4 << 20
	Slots       = 2
	SegBytes    = HeaderBytes + Slots*SlotBytes

	// The progress counters, each in a cache line of its own.
	OffArrive  = 0   // chunks whose input this rank has copied in
	OffReduced = 64  // chunks whose shard this rank has reduced
	OffDone    = 128 // chunks this rank has copied out (its slots may be reused)
	// a mixed in-place AllReduce: this rank's first chunk is in its slot (Note [buffers peers read in place])
	OffCopied = 192
	// OffSleeping, added to a counter's offset, is the word where this
	// rank says it sleeps in the kernel on some peer's counter at that
	// offset: Note [wake only sleepers].
	OffSleeping = 4

	OffMeta    = 256 // per slot, MetaStride bytes: the chunk's Call and number, then OffMetaPlace
	MetaStride = 64
	// CallBytes of a slot's metadata are the Call and chunk number that
	// every rank compares with its own; then, at OffMetaPlace, where this
	// rank's tensor starts in its arena plus one (0: not in its arena),
	// which differs by rank: Note [buffers peers read in place].
	CallBytes    = 32
	OffMetaPlace = 32
)

// Run is the collective a transfer belongs to, as the group runs it: the
// checks between waits and the errors that name a peer.
type Run interface {
	// Check is nil while the collective may go on waiting for peer; it
	// is called between futex sleeps of at most a few milliseconds, so
	// it should say at once when the deadline passed, the caller's ctx
	// ended, the group failed or peer's connection broke.
	Check(peer int) error
	// Fail is the collective's error about peer, of kind (a pg sentinel).
	Fail(peer int, kind, err error) error
}

// World is a group's shared-memory transport: the segment of every rank
// on this host that this rank shares memory with, mapped into this
// process. Collectives run on it one at a time, in the same order on
// every member (the group's executor sees to that).
type World struct {
	segs    [][]byte // by rank; segs[me] is this rank's own, nil for ranks it does not share with
	members []int    // the ranks whose segments are mapped, ascending, this rank included
	me      int
	chunk   uint32 // the chunks this world has run so far (the same on every member)
	scratch kernel.Scratch
	arena   *arena       // this rank's arena (Alloc, Free); nil in worlds made without one
	inPlace atomic.Int64 // AllReduces that read the peers' tensors in place
}

// InPlaceRuns is how many AllReduces read the peers' tensors in place
// (Note [buffers peers read in place]). It may be read while collectives
// run.
func (w *World) InPlaceRuns() int { return int(w.inPlace.Load()) }

// Full reports whether every rank of the group is a member, so that a
// collective can run entirely through shared memory.
func (w *World) Full() bool { return len(w.members) == len(w.segs) }

// Members is the ranks that share memory, ascending, this rank included.
func (w *World) Members() []int { return w.members }

// Chunk is how many chunks the world has run.
func (w *World) Chunk() uint32 { return w.chunk }

// Segment is rank's mapped segment up to its arena (the header and the
// slots), nil when rank is no member. It is for tests that play a faulty
// peer by writing garbage into it.
func (w *World) Segment(rank int) []byte {
	if w.segs[rank] == nil {
		return nil
	}
	return w.segs[rank][:SegBytes]
}

// Close unmaps every segment. The world must not be used after. Once
// Alloc has handed out a buffer, this rank's own segment stays mapped
// until the process exits, its free memory given back (arena.retire).
func (w *World) Close() {
	if w.arena != nil && w.arena.retire() {
		segs := slices.Clone(w.segs)
		segs[w.me] = nil
		unmapAll(segs)
		return
	}
	unmapAll(w.segs)
}

func (w *World) word(rank, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&w.segs[rank][off]))
}

func (w *World) slot(rank, slot int) []byte {
	b := HeaderBytes + slot*SlotBytes
	return w.segs[rank][b : b+SlotBytes : b+SlotBytes]
}

func (w *World) meta(rank, slot int) []byte {
	b := OffMeta + slot*MetaStride
	return w.segs[rank][b : b+MetaStride : b+MetaStride]
}

// Note [wake only sleepers]: a futex wake is a system call, and most
// publishes have no one to wake: the peers are still spinning, or have
// not arrived. So a waiter about to sleep on a peer's counter first sets
// its own sleeping word for that counter's offset, then loads the counter
// again and sleeps only if it is unchanged (futexWait itself also returns
// at once if the word moved). A publisher stores its counter, then loads
// every member's sleeping word for that offset and wakes only if one is
// set. Go's atomics are sequentially consistent, so of the two (the
// waiter's load after its flag, the publisher's load after its counter)
// at least one sees the other's store: no wake is lost. A rank writes
// only its own segment; a peer that writes garbage into its sleeping
// word costs this rank a spurious wake at most, and a wake it misses is
// still bounded by the sleep's poll interval.

// Note [yield before sleeping]: between the spin and the futex sleep, a
// waiter calls sched_yield a few times (yields), loading the counter after
// each. On an idle core a yield returns at once and this is a longer spin;
// on a busy machine (more runnable threads than cores, the usual case on
// a small host running several ranks) it hands the core to whoever waits
// for one, often the very peer this rank waits for, while this thread
// stays runnable and sees the peer's publish at its next turn. A futex
// sleep instead leaves the run queue: waking takes the peer a system call
// and this thread a trip through the scheduler, and on a loaded machine
// that trip is the largest part of a small collective. Under mpirun -np 2
// on 2 busy cores, 64 yields took a 64 B allreduce's median from 41 µs to
// 9.9 µs and a barrier's from 64 to 17.8 µs (Open MPI's, in the same jobs,
// 46 and 35 µs), for about 3 points more of a core while a rank waits 5 ms
// for a late peer (BenchmarkWaitCPU): docs/process-groups.md.

// publish stores v in this rank's counter at off and wakes whoever
// sleeps on it.
func (w *World) publish(off int, v uint32) {
	p := w.word(w.me, off)
	atomic.StoreUint32(p, v)
	for _, j := range w.members {
		if j != w.me && atomic.LoadUint32(w.word(j, off+OffSleeping)) != 0 {
			futexWake(p)
			return
		}
	}
}

// reached reports whether counter v has reached c (modulo 2^32).
func reached(v, c uint32) bool { return int32(v-c) >= 0 }

// waitAll waits until every other member's counter at off has reached c.
func (w *World) waitAll(r Run, off int, c uint32) error {
	for _, j := range w.members {
		if j == w.me {
			continue
		}
		if err := w.wait(r, j, off, c); err != nil {
			return err
		}
	}
	return nil
}

// wait waits until peer's counter at off reaches c: a short spin, then
// a few yields of the core (Note [yield before sleeping]), then futex
// waits of at most poll, between which r checks, as every wait of a
// collective does, the peer's connection, the deadline, the caller's ctx
// and the group's failure.
func (w *World) wait(r Run, peer, off int, c uint32) error {
	p := w.word(peer, off)
	for range spin {
		if reached(atomic.LoadUint32(p), c) {
			return nil
		}
	}
	for range yields {
		osYield()
		if reached(atomic.LoadUint32(p), c) {
			return nil
		}
	}
	sleeping := w.word(w.me, off+OffSleeping)
	for {
		v := atomic.LoadUint32(p)
		if reached(v, c) {
			return nil
		}
		if err := r.Check(peer); err != nil {
			return err
		}
		atomic.StoreUint32(sleeping, 1) // Note [wake only sleepers]
		if atomic.LoadUint32(p) == v {
			futexWait(p, v, poll)
		}
		atomic.StoreUint32(sleeping, 0)
	}
}

// next starts the world's next chunk: it waits until every peer is done
// with the chunk this rank's slot last held, and returns the chunk's
// number and slot.
func (w *World) next(r Run) (uint32, int, error) {
	w.chunk++
	c := w.chunk
	if err := w.waitAll(r, OffDone, c-Slots); err != nil {
		return 0, 0, err
	}
	return c, int(c % Slots), nil
}

// arrive publishes that this rank's part of chunk c is in its slot, with
// the call, waits until every peer's is, and checks that every peer's
// call is this rank's.
func (w *World) arrive(r Run, c uint32, slot int, call Call) error {
	return w.arriveWith(r, c, slot, call.Meta(c))
}

// arriveWith is arrive with the metadata already made (Call.Meta and,
// for AllReduce's first chunk, where this rank's tensor lies).
func (w *World) arriveWith(r Run, c uint32, slot int, meta [MetaStride]byte) error {
	copy(w.meta(w.me, slot), meta[:])
	w.publish(OffArrive, c)
	if err := w.waitAll(r, OffArrive, c); err != nil {
		return err
	}
	for _, j := range w.members {
		if j != w.me {
			if err := w.checkMeta(r, j, slot, meta[:]); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkMeta fails with pg.ErrMismatch, naming peer, unless the chunk in
// peer's slot is the one this rank expects (meta). It only compares:
// nothing read from the peer is used as a length or an offset.
func (w *World) checkMeta(r Run, peer, slot int, meta []byte) error {
	pm := w.meta(peer, slot)[:CallBytes]
	if string(pm) == string(meta[:CallBytes]) {
		return nil
	}
	theirs, tc := callOf(pm)
	ours, c := callOf(meta)
	return r.Fail(peer, pg.ErrMismatch, fmt.Errorf("rank %d issued %v as shared-memory chunk %d where this rank issued "+
		"%v (chunk %d): ranks must issue the same collectives in the same order, with the same sizes, dtypes, ops and roots",
		peer, theirs, tc, ours, c))
}
