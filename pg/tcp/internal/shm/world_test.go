package shm

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// testRun is a Run for worlds in one process: waits give up at the
// deadline, and errors name the peer.
type testRun struct{ deadline time.Time }

func (r testRun) Check(peer int) error {
	if time.Now().After(r.deadline) {
		return fmt.Errorf("rank %d made no progress: %w", peer, pg.ErrTimeout)
	}
	return nil
}

func (r testRun) Fail(peer int, kind, err error) error {
	return &pg.CollectiveError{Op: "test", Peer: peer, Kind: kind, Err: err}
}

// inProcess makes n Worlds over segments in this process's memory, as
// Setup would map them from n processes.
func inProcess(n int) []*World {
	segs := make([][]byte, n)
	for j := range segs {
		segs[j] = make([]byte, SegBytes)
	}
	members := make([]int, n)
	ws := make([]*World, n)
	for j := range n {
		members[j] = j
	}
	for j := range n {
		ws[j] = &World{segs: segs, members: members, me: j}
	}
	return ws
}

// each runs f on every rank at once and returns their errors.
func each(ws []*World, f func(r int, w *World) error) []error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for r, w := range ws {
		wg.Go(func() { errs[r] = f(r, w) })
	}
	wg.Wait()
	return errs
}

// TestWorldInProcess runs AllReduce over more than one slot and a
// Broadcast on worlds in one process: every rank gets the same sum, in
// the chunks the counters say.
func TestWorldInProcess(t *testing.T) {
	const n = 3
	ws := inProcess(n)
	run := testRun{deadline: time.Now().Add(20 * time.Second)}
	length := SlotBytes/4 + 7 // two chunks
	bufs := make([][]float32, n)
	errs := each(ws, func(r int, w *World) error {
		bufs[r] = make([]float32, length)
		for i := range bufs[r] {
			bufs[r][i] = float32(r + i%5)
		}
		return w.AllReduce(run, pg.Float32s(bufs[r]), pg.Op(pg.Sum))
	})
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for _, i := range []int{0, 4, length - 1} {
			if want := float32(3 + 3*(i%5)); bufs[r][i] != want {
				t.Fatalf("rank %d [%d] = %v, want %v", r, i, bufs[r][i], want)
			}
		}
		if got := ws[r].Chunk(); got != 2 {
			t.Errorf("rank %d ran %d chunks, want 2", r, got)
		}
	}
	errs = each(ws, func(r int, w *World) error {
		bufs[r] = []float32{float32(r), float32(10 * r)}
		return w.Broadcast(run, pg.Float32s(bufs[r]), 2)
	})
	for r := range n {
		if errs[r] != nil || !slices.Equal(bufs[r], []float32{2, 20}) {
			t.Errorf("broadcast, rank %d: %v %v", r, errs[r], bufs[r])
		}
	}
}

// TestWorldMismatch: ranks that disagree on a collective's root fail
// with pg.ErrMismatch naming a peer whose call differs, and no rank hangs.
func TestWorldMismatch(t *testing.T) {
	ws := inProcess(2)
	run := testRun{deadline: time.Now().Add(5 * time.Second)}
	errs := each(ws, func(r int, w *World) error {
		return w.Broadcast(run, pg.NewTensor(pg.Int64, 3), r) // each rank its own root
	})
	for r, err := range errs {
		var ce *pg.CollectiveError
		if !errors.As(err, &ce) || !errors.Is(err, pg.ErrMismatch) || ce.Peer != 1-r {
			t.Errorf("rank %d: %v, want a mismatch naming rank %d", r, err, 1-r)
		}
	}
}
