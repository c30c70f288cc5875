package tcp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// wantNames fails t unless err is a *pg.CollectiveError of one of kinds
// that names peer.
func wantNames(t *testing.T, what string, err error, peer int, kinds ...error) {
	t.Helper()
	var ce *pg.CollectiveError
	if !errors.As(err, &ce) || ce.Peer != peer {
		t.Errorf("%s: got %v, want a *pg.CollectiveError naming rank %d", what, err, peer)
		return
	}
	for _, k := range kinds {
		if errors.Is(err, k) {
			return
		}
	}
	t.Errorf("%s: got %v, want one of %v", what, err, kinds)
}

// TestStalledPeerTimesOut: rank 1 sends at 2 KB/s, so in the middle of a
// ring allreduce rank 0 waits for it in vain. Rank 0 fails with
// pg.ErrTimeout naming rank 1 after the group timeout, and rank 1 fails
// soon after instead of trickling on.
func TestStalledPeerTimesOut(t *testing.T) {
	const timeout = 500 * time.Millisecond
	gs := newGroups(t, 2, timeout, func(o *Options) {
		o.RingThreshold = 1
		if o.Rank == 1 { // slow, and patient: rank 0 times out first
			o.LinkBytesPerSec = 2000
			o.Timeout = time.Minute
		}
	})
	start := time.Now()
	errs := each(gs, func(r int, g *Group) error {
		return g.AllReduce(context.Background(), pg.NewTensor(pg.Float32, 64<<10), pg.Op(pg.Sum)).Wait(context.Background())
	})
	took := time.Since(start)
	wantNames(t, "rank 0", errs[0], 1, pg.ErrTimeout)
	if errs[1] == nil {
		t.Errorf("rank 1 succeeded; want it to fail with rank 0")
	}
	if took < timeout*9/10 || took > timeout+3*time.Second {
		t.Errorf("the ranks failed after %v; want about the group timeout %v", took, timeout)
	}
}

// TestCloseDuringRing: rank 2 closes while a ring allreduce, slowed by
// rank 1's limited link, is half way. Ranks 0 and 1 fail at once naming
// rank 2 (not after the minute-long group timeout), and rank 2's own
// Work fails with pg.ErrClosed. (Shared memory is off: ranks 0 and 2
// would otherwise share it, and rank 0 would allreduce with rank 1 alone,
// hierarchically.)
func TestCloseDuringRing(t *testing.T) {
	gs := newGroups(t, 3, time.Minute, func(o *Options) {
		o.NoSharedMemory = true
		if o.Rank == 1 {
			o.LinkBytesPerSec = 1 << 20
		}
	})
	ctx := context.Background()
	works := make([]pg.Work, 3)
	for r, g := range gs {
		works[r] = g.AllReduce(ctx, pg.NewTensor(pg.Float32, 1<<20), pg.Op(pg.Sum))
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	gs[2].Close()
	for r := range 2 {
		wantNames(t, "survivor", works[r].Wait(ctx), 2, pg.ErrRemote, pg.ErrComm)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the survivors took %v to notice", took)
	}
	if err := works[2].Wait(ctx); !errors.Is(err, pg.ErrClosed) {
		t.Errorf("rank 2's own allreduce: got %v, want pg.ErrClosed", err)
	}
	if err := gs[2].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := gs[2].Barrier(ctx).Wait(ctx); !errors.Is(err, pg.ErrClosed) {
		t.Errorf("barrier after Close: got %v, want pg.ErrClosed", err)
	}
}

// TestContextCancelAborts: cancelling the ctx of a pending collective
// fails it with pg.ErrTimeout wrapping the cause and aborts the group; the
// peer hears of it and its next collective fails naming this rank.
func TestContextCancelAborts(t *testing.T) {
	gs := newGroups(t, 2, time.Minute, nil)
	bg := context.Background()
	ctx, cancel := context.WithCancelCause(bg)
	cause := errors.New("test: gave up")
	w := gs[0].AllReduce(ctx, pg.NewTensor(pg.Float32, 100), pg.Op(pg.Sum))
	time.Sleep(50 * time.Millisecond)
	cancel(cause)
	if err := w.Wait(bg); !errors.Is(err, pg.ErrTimeout) || !errors.Is(err, cause) {
		t.Errorf("cancelled allreduce: got %v, want pg.ErrTimeout wrapping the cause", err)
	}
	if err := gs[0].Barrier(bg).Wait(bg); !errors.Is(err, pg.ErrAborted) {
		t.Errorf("barrier after the cancel: got %v, want pg.ErrAborted", err)
	}
	// Rank 1 learns from rank 0's abort frame. (A collective it issued
	// before the frame arrived could still finish with rank 0's data.)
	for deadline := time.Now().Add(5 * time.Second); gs[1].failure.Load() == nil; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rank 1 never heard of rank 0's abort")
		}
	}
	err := gs[1].AllReduce(bg, pg.NewTensor(pg.Float32, 100), pg.Op(pg.Sum)).Wait(bg)
	wantNames(t, "rank 1", err, 0, pg.ErrRemote)
	if !errors.Is(err, pg.ErrAborted) {
		t.Errorf("rank 1: %v does not say rank 0 aborted", err)
	}
}

// TestMismatchedLengths: ranks that disagree on a tensor's length get
// pg.ErrMismatch instead of garbage.
func TestMismatchedLengths(t *testing.T) {
	for _, algo := range []struct {
		name      string
		threshold int
	}{{"ring", 1}, {"doubling", 1 << 30}, {"shm", 1}} {
		t.Run(algo.name, func(t *testing.T) {
			gs := newGroups(t, 2, 10*time.Second, func(o *Options) {
				o.RingThreshold = algo.threshold
				o.NoSharedMemory = algo.name != "shm"
			})
			errs := each(gs, func(r int, g *Group) error {
				return g.AllReduce(context.Background(), pg.NewTensor(pg.Float32, 1000+10*r),
					pg.Op(pg.Sum)).Wait(context.Background())
			})
			if !errors.Is(errs[0], pg.ErrMismatch) && !errors.Is(errs[1], pg.ErrMismatch) {
				t.Errorf("got %v and %v, want pg.ErrMismatch on a rank", errs[0], errs[1])
			}
		})
	}
}

// TestLinkLimit: with LinkBytesPerSec set, a ring allreduce of 1 MiB on
// two ranks, which sends 1 MiB over each link, takes at least the time
// the limit allows.
func TestLinkLimit(t *testing.T) {
	const rate = 4 << 20
	gs := newGroups(t, 2, time.Minute, func(o *Options) { o.LinkBytesPerSec = rate; o.RingThreshold = 1 })
	start := time.Now()
	checkAllReduce(t, gs, 1<<18)
	if took, least := time.Since(start), time.Second/4*9/10; took < least {
		t.Errorf("1 MiB per link at %d B/s took %v, want at least %v", rate, took, least)
	}
}

// TestManyInFlight issues 200 collectives of every kind before waiting
// for any, so that frames of later collectives arrive early and wait in
// the mailboxes.
func TestManyInFlight(t *testing.T) {
	gs := newGroups(t, 3, time.Minute, func(o *Options) { o.ChunkBytes = 256 })
	ctx := context.Background()
	const count = 200
	bufs := make([][][]int32, len(gs))
	errs := each(gs, func(r int, g *Group) error {
		works := make([]pg.Work, count)
		bufs[r] = make([][]int32, count)
		for i := range count {
			b := make([]int32, 1+(i*37)%500)
			for j := range b {
				b[j] = int32(r*i + j)
			}
			bufs[r][i] = b
			switch i % 3 {
			case 0:
				works[i] = g.AllReduce(ctx, pg.Int32s(b), pg.Op(pg.Sum))
			case 1:
				works[i] = g.Broadcast(ctx, pg.Int32s(b), (i/3)%len(gs))
			default:
				works[i] = g.Barrier(ctx)
			}
		}
		return pg.WaitAll(ctx, works...)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for i := range count {
		for j, v := range bufs[1][i] {
			var want int32
			switch i % 3 {
			case 0:
				want = int32(3*j + 3*i) // (0+1+2)*i + 3j
			case 1:
				want = int32((i/3)%3*i + j)
			default:
				continue
			}
			for r := range gs {
				if bufs[r][i][j] != v {
					t.Fatalf("collective %d: rank %d differs from rank 1 at %d", i, r, j)
				}
			}
			if v != want {
				t.Fatalf("collective %d element %d: got %d, want %d", i, j, v, want)
			}
		}
	}
}
