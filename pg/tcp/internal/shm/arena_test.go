package shm

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// inProcessArena is inProcess with an arena of arenaBytes after each
// rank's slots.
func inProcessArena(n, arenaBytes int) []*World {
	ws := inProcess(n)
	segs := ws[0].segs
	for j := range segs {
		segs[j] = make([]byte, SegBytes+arenaBytes)
	}
	for j, w := range ws {
		w.segs = segs
		w.arena = newArena(segs[j][SegBytes:])
	}
	return ws
}

func TestArenaAllocFree(t *testing.T) {
	w := inProcessArena(1, 4*arenaAlign)[0]
	a, offA, err := w.Alloc(10)
	if err != nil || len(a) != 10 || offA != 0 {
		t.Fatal(len(a), offA, err)
	}
	b, offB, err := w.Alloc(arenaAlign + 1) // two pages
	if err != nil || offB != arenaAlign {
		t.Fatal(offB, err)
	}
	if _, _, err := w.Alloc(2 * arenaAlign); !errors.Is(err, ErrArenaFull) {
		t.Fatalf("a third of two pages in four: %v, want ErrArenaFull", err)
	}
	b[0] = 7
	if err := w.Free(offB); err != nil {
		t.Fatal(err)
	}
	if err := w.Free(offB); err == nil {
		t.Fatal("a double free succeeded")
	}
	if err := w.Free(offA); err != nil || w.Live() != 0 {
		t.Fatal(err, w.Live())
	}
	// Freed neighbours coalesce: the whole arena is one span again, and
	// reused memory comes back zeroed.
	all, off, err := w.Alloc(4 * arenaAlign)
	if err != nil || off != 0 || all[arenaAlign] != 0 {
		t.Fatalf("the whole arena after freeing everything: off %d, %v, reused byte %d", off, err, all[arenaAlign])
	}
	if _, _, err := w.Alloc(math.MaxInt - 10); !errors.Is(err, ErrArenaFull) {
		t.Fatalf("an Alloc whose rounding would overflow: %v, want ErrArenaFull", err)
	}
	if _, _, err := inProcess(1)[0].Alloc(1); !errors.Is(err, ErrArenaFull) {
		t.Fatalf("a world without an arena: %v, want ErrArenaFull", err)
	}
}

// TestAllReduceInPlace: tensors in every rank's arena are reduced in
// place (the world says so), with the bits of the same AllReduce through
// the slots; a world where only some ranks' tensors are in their arenas
// (mixed) runs through the slots and gets them too.
func TestAllReduceInPlace(t *testing.T) {
	const n = 3
	length := (2*SlotBytes+SlotBytes/3)/8 + 5 // three chunks of float64, the last short
	ws := inProcessArena(n, 4*SlotBytes)
	run := testRun{deadline: time.Now().Add(30 * time.Second)}
	fill := func(r int, x []float64) {
		for i := range x {
			x[i] = math.Sin(float64(r*7+i)) * 1e3 // sums that round differently by order
		}
	}
	heap := make([][]float64, n)
	arena := make([][]float64, n)
	offs := make([]int, n)
	for r, w := range ws {
		heap[r] = make([]float64, length)
		fill(r, heap[r])
		b, off, err := w.Alloc(8 * length)
		if err != nil {
			t.Fatal(err)
		}
		offs[r] = off
		arena[r] = pg.View[float64](pg.Tensor{Dtype: pg.Float64, Data: b})
		fill(r, arena[r])
	}
	for _, tc := range []struct {
		name    string
		inArena func(r int) bool
		inPlace int
	}{
		{"slots", func(int) bool { return false }, 0},
		{"in place", func(int) bool { return true }, 1},
		{"mixed", func(r int) bool { return r == 1 }, 0},
		{"unaligned", func(int) bool { return true }, 0}, // in the arenas, off the dtype's alignment: the slots
	} {
		bufs := make([][]float64, n)
		tensors := make([]pg.Tensor, n)
		for r := range n {
			bufs[r] = make([]float64, length)
			if tc.inArena(r) {
				bufs[r] = arena[r]
			}
			fill(r, bufs[r])
			tensors[r] = pg.Float64s(bufs[r])
			if tc.name == "unaligned" {
				b := pg.Float64s(arena[r]).Data
				tensors[r] = pg.Tensor{Dtype: pg.Float64, Data: b[4 : 4+8*(length-1)]}
				copy(tensors[r].Data, pg.Float64s(heap[r][:length-1]).Data)
			}
		}
		before := ws[0].InPlaceRuns()
		errs := each(ws, func(r int, w *World) error {
			return w.AllReduce(run, tensors[r], pg.Op(pg.Avg))
		})
		for r := range n {
			if errs[r] != nil {
				t.Fatalf("%s: rank %d: %v", tc.name, r, errs[r])
			}
		}
		if got := ws[0].InPlaceRuns() - before; got != tc.inPlace {
			t.Errorf("%s: %d AllReduces in place, want %d", tc.name, got, tc.inPlace)
		}
		if tc.name == "slots" {
			for r := range n {
				copy(heap[r], bufs[r])
			}
			continue
		}
		if tc.name == "unaligned" {
			for r := range n {
				if ws[r].InPlaceRuns() != ws[0].InPlaceRuns() {
					t.Fatalf("unaligned: ranks disagree on the path")
				}
			}
			continue // its sums are over other inputs; the path is what it checks
		}
		for r := range n {
			for i := range bufs[r] {
				if math.Float64bits(bufs[r][i]) != math.Float64bits(heap[0][i]) {
					t.Fatalf("%s: rank %d [%d] = %v, through the slots %v", tc.name, r, i, bufs[r][i], heap[0][i])
				}
			}
		}
	}
	for r, w := range ws {
		if err := w.Free(offs[r]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAllReduceInPlaceBadOffset: a peer whose published offset does not
// lie in its arena as this rank mapped it (here: rank 0 maps a shorter
// view of rank 1's arena than rank 1 allocated from) makes this rank fail
// with pg.ErrMismatch naming that peer, not read outside the mapping, and
// no rank hangs.
func TestAllReduceInPlaceBadOffset(t *testing.T) {
	ws := inProcessArena(2, 2*SlotBytes)
	short := append([][]byte(nil), ws[0].segs...)
	short[1] = short[1][:SegBytes+SlotBytes/2]
	ws[0] = &World{segs: short, members: ws[0].members, me: 0, arena: ws[0].arena}
	run := testRun{deadline: time.Now().Add(3 * time.Second)}
	length := SlotBytes / 4 // one chunk
	errs := each(ws, func(r int, w *World) error {
		b, _, err := w.Alloc(SlotBytes + 4*length) // past what rank 0 maps of rank 1's arena
		if err != nil {
			return err
		}
		return w.AllReduce(run, pg.Tensor{Dtype: pg.Float32, Data: b[SlotBytes:]}, pg.Op(pg.Sum))
	})
	var ce *pg.CollectiveError
	if !errors.As(errs[0], &ce) || !errors.Is(errs[0], pg.ErrMismatch) || ce.Peer != 1 {
		t.Fatalf("rank 0: %v, want a mismatch naming rank 1", errs[0])
	}
	if errs[1] == nil {
		t.Fatal("rank 1 succeeded while rank 0 failed")
	}
	t.Logf("rank 0: %v; rank 1: %v", errs[0], errs[1])
}
