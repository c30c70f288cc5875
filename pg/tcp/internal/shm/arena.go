package shm

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"
)

// Note [buffers peers read in place]
//
// Through the slots, an AllReduce moves each byte of a rank's tensor
// through memory about 4 times (copied into its slot, reduced from it,
// the result written to the slot as well, copied out by the peer), where
// ranks in one process (pg/local) read and write each other's tensors
// where they lie: each reduces its shard of every rank's tensor into
// every rank's tensor, so an element is read n times and written n times
// in all. At 64 MiB that held pg/tcp to about half of pg/local's
// bandwidth, whatever the chunk size.
//
// So each rank's segment ends in an arena (Config.ArenaBytes, sparse: a
// page costs memory only once touched), which the peers map with the
// rest of the segment at Setup. World.Alloc hands out buffers from this
// rank's arena (backend.HostBufferAllocator, through pg/tcp's group; the
// reducer keeps its buckets there). When every rank's tensor of an
// AllReduce lies in its arena, the ranks do what pg/local does
// (allReduceInPlace): after the first chunk's arrival, each reduces its
// shard straight from every rank's tensor into every rank's tensor, in
// rank order (the bits of the slots' path), publishes that it is done,
// and returns once every peer is: two waits in all, whatever the size.
//
// Each rank publishes where in its arena its tensor starts, with the
// first chunk's metadata. That is the one value read from a peer that is
// used as an offset, so it is checked before any use: the tensor must lie
// wholly inside the peer's mapped arena (the length is this rank's own,
// which the call check has shown to be the peer's too), and be aligned to
// the dtype. A peer that lies about it can make this rank read and write
// the wrong bytes of that peer's own arena, never outside a mapping. In
// place, a rank writes into its peers' tensors (its shard of each): the
// one exception to "a rank writes only its own segment", and no more
// trust than a peer already has, whose contribution is in every sum.
//
// The ranks must choose the same path, and each knows only where its own
// tensor lies: they decide at the first chunk, from the offsets all of
// them published before arriving (so all decide alike). A rank whose
// tensor lies in its arena does not copy its first chunk into its slot
// before arriving; if some peer's tensor does not (a mixed world), it
// copies then, and every rank waits once more (OffCopied) before
// reading the slots. Worlds where no tensor is in an arena run exactly
// as before.

// DefaultArenaBytes is the arena's size when Config.ArenaBytes is 0:
// virtual size, 1 GiB, which costs memory only as buffers are used.
const DefaultArenaBytes = 1 << 30

// MaxArenaBytes bounds the arena a peer's segment may bring: a peer's
// segment larger than SegBytes+MaxArenaBytes is refused.
const MaxArenaBytes = 1 << 40

// arenaAlign is the alignment and granularity of buffers: a page, so
// that no two buffers share one.
const arenaAlign = 4096

// arena hands out ranges of this rank's arena: first fit over a sorted
// free list. It is used by Alloc and Free, from any goroutine, never by
// the collectives.
type arena struct {
	mu     sync.Mutex
	mem    []byte
	free   []span      // sorted by off, coalesced
	live   map[int]int // off -> length of the buffers handed out
	used   bool        // Alloc has handed out a buffer
	closed bool        // the world is closed: freed memory goes back to the kernel
}

type span struct{ off, n int }

func newArena(mem []byte) *arena {
	a := &arena{mem: mem, live: map[int]int{}}
	if len(mem) > 0 {
		a.free = []span{{0, len(mem)}}
	}
	return a
}

// ErrArenaFull is Alloc's error when the arena has no room (or there is
// none): the caller uses memory of its own, and collectives on it go
// through the slots.
var ErrArenaFull = errors.New("shm: no room in the shared-memory arena")

// Alloc returns a zeroed buffer of n bytes in this rank's arena and its
// offset there. Free returns it.
func (w *World) Alloc(n int) ([]byte, int, error) {
	a := w.arena
	if a == nil || n <= 0 || n > len(a.mem) {
		return nil, 0, fmt.Errorf("%w (%d bytes asked)", ErrArenaFull, n)
	}
	size := (n + arenaAlign - 1) &^ (arenaAlign - 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, s := range a.free {
		if s.n < size {
			continue
		}
		if s.n == size {
			a.free = slices.Delete(a.free, i, i+1)
		} else {
			a.free[i] = span{s.off + size, s.n - size}
		}
		a.live[s.off] = size
		a.used = true
		b := a.mem[s.off : s.off+n : s.off+n]
		clear(b)
		return b, s.off, nil
	}
	return nil, 0, fmt.Errorf("%w: %d bytes asked, %d of %d in use", ErrArenaFull, n, a.inUse(), len(a.mem))
}

// Free returns the buffer Alloc gave at off. Freeing what is not live is
// an error (a double free), and changes nothing.
func (w *World) Free(off int) error {
	a := w.arena
	if a == nil {
		return errors.New("shm: Free without an arena")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	size, ok := a.live[off]
	if !ok {
		return fmt.Errorf("shm: Free of offset %d, which is not a live buffer", off)
	}
	delete(a.live, off)
	i, _ := slices.BinarySearchFunc(a.free, off, func(s span, off int) int { return s.off - off })
	a.free = slices.Insert(a.free, i, span{off, size})
	if a.closed {
		releasePages(a.mem[off : off+size])
	}
	// Coalesce with the neighbours.
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = slices.Delete(a.free, i+1, i+2)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = slices.Delete(a.free, i, i+1)
	}
	return nil
}

// Live is how many buffers Alloc handed out that are not freed.
func (w *World) Live() int {
	if w.arena == nil {
		return 0
	}
	w.arena.mu.Lock()
	defer w.arena.mu.Unlock()
	return len(w.arena.live)
}

// retire, at the world's Close, reports whether the arena ever handed
// out a buffer, in which case this rank's segment must stay mapped: a
// caller may still hold a buffer, or a view of one it freed (a gradient
// of a closed reducer), and touching unmapped memory would crash the
// process. The memory of every free span, now and later, goes back to
// the kernel (it reads as zeros); only the buffers still live keep theirs.
func (a *arena) retire() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if !a.used {
		return false
	}
	for _, s := range a.free {
		releasePages(a.mem[s.off : s.off+s.n])
	}
	return true
}

func (a *arena) inUse() int {
	n := 0
	for _, s := range a.live {
		n += s
	}
	return n
}

// arenaOf is rank's arena as mapped here: what follows the slots in its
// segment (empty when it has none).
func (w *World) arenaOf(rank int) []byte {
	return w.segs[rank][SegBytes:]
}

// ownOffset is where b, a tensor of es-byte elements, starts in this
// rank's arena, if it lies wholly inside it, aligned to es (the peers
// would refuse it otherwise, as they refuse a corrupt offset).
func (w *World) ownOffset(b []byte, es int) (int, bool) {
	mine := w.arenaOf(w.me)
	if len(b) == 0 || len(mine) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mine)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p-base > uintptr(len(mine)) || uintptr(len(mine))-(p-base) < uintptr(len(b)) ||
		(p-base)%uintptr(es) != 0 {
		return 0, false
	}
	return int(p - base), true
}

// peerTensor is peer's tensor of n bytes at off in its arena, as peer
// published it, after the checks of Note [buffers peers read in place]:
// ok is false when it does not lie inside peer's arena or is not aligned
// to es.
func (w *World) peerTensor(peer, off, n, es int) ([]byte, bool) {
	a := w.arenaOf(peer)
	if off < 0 || n < 0 || off > len(a) || len(a)-off < n || off%es != 0 {
		return nil, false
	}
	return a[off : off+n : off+n], true
}
