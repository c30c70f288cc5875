package local_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// start makes n ranks with the given group timeout and closes them when t
// ends.
func start(t *testing.T, n int, timeout time.Duration) []*local.Group {
	t.Helper()
	groups, err := local.New(n, local.Options{Timeout: timeout})
	if err != nil {
		t.Fatalf("New(%d): %v", n, err)
	}
	t.Cleanup(func() {
		for _, g := range groups {
			if err := g.Close(); err != nil {
				t.Errorf("rank %d: Close: %v", g.Rank(), err)
			}
		}
	})
	return groups
}

// wait waits for w, failing the test if it takes more than a few seconds.
func wait(t *testing.T, w pg.Work) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-w.Done():
		return w.Err()
	case <-ctx.Done():
		t.Fatal("the Work hung")
		return nil
	}
}

// wantCollErr checks that err is a *pg.CollectiveError of kind naming peer.
func wantCollErr(t *testing.T, who string, err error, kind error, peer int) *pg.CollectiveError {
	t.Helper()
	var ce *pg.CollectiveError
	if !errors.As(err, &ce) || !errors.Is(err, kind) || ce.Peer != peer {
		t.Fatalf("%s: got %v, want a *pg.CollectiveError of kind %v with peer %d", who, err, kind, peer)
	}
	return ce
}

func f32(vs ...float32) pg.Tensor { return pg.Float32s(vs) }

func TestNewRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		n    int
		opts local.Options
	}{{0, local.Options{}}, {-1, local.Options{}}, {2, local.Options{Timeout: -time.Second}}, {4096 + 1, local.Options{}},
		{2_000_000_000, local.Options{}}} {
		if _, err := local.New(c.n, c.opts); !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("New(%d, %+v): got %v, want pg.ErrInvalidArgument", c.n, c.opts, err)
		}
	}
}

func TestIdentity(t *testing.T) {
	groups := start(t, 3, time.Minute)
	for i, g := range groups {
		if g.Rank() != i || g.Size() != 3 || pg.BackendName(g) != "local" {
			t.Errorf("group %d: rank %d size %d backend %q", i, g.Rank(), g.Size(), pg.BackendName(g))
		}
	}
}

func TestNilContextIsInvalid(t *testing.T) {
	g := start(t, 1, time.Minute)[0]
	//lint:ignore SA1012 the nil context is the point
	if err := wait(t, g.Barrier(nil)); !errors.Is(err, pg.ErrInvalidArgument) { //nolint:staticcheck
		t.Fatalf("Barrier(nil): got %v, want pg.ErrInvalidArgument", err)
	}
}

func TestMismatchNamesBothRanks(t *testing.T) {
	ctx := context.Background()
	for name, issue := range map[string]func(r int, g *local.Group) pg.Work{
		"kind": func(r int, g *local.Group) pg.Work {
			if r == 1 {
				return g.Broadcast(ctx, f32(1, 2), 0)
			}
			return g.AllReduce(ctx, f32(1, 2), pg.Op(pg.Sum))
		},
		"length": func(r int, g *local.Group) pg.Work {
			return g.AllReduce(ctx, pg.NewTensor(pg.Float32, 2+r%2), pg.Op(pg.Sum))
		},
		"dtype": func(r int, g *local.Group) pg.Work {
			if r == 1 {
				return g.AllReduce(ctx, pg.NewTensor(pg.Int32, 2), pg.Op(pg.Sum))
			}
			return g.AllReduce(ctx, f32(1, 2), pg.Op(pg.Sum))
		},
		"op": func(r int, g *local.Group) pg.Work {
			return g.AllReduce(ctx, f32(1, 2), pg.Op(pg.ReduceKind(r%2)))
		},
		"root": func(r int, g *local.Group) pg.Work { return g.Broadcast(ctx, f32(1, 2), r%2) },
	} {
		t.Run(name, func(t *testing.T) {
			groups := start(t, 3, time.Minute)
			works := make([]pg.Work, 3)
			for r, g := range groups {
				works[r] = issue(r, g)
			}
			// Rank 1 differs from ranks 0 and 2; whoever arrives second
			// sees the mismatch, and everyone reports the pair.
			for r, w := range works {
				err := wait(t, w)
				var ce *pg.CollectiveError
				if !errors.As(err, &ce) || !errors.Is(err, pg.ErrMismatch) || !strings.Contains(err.Error(), "rank 1 issued") {
					t.Errorf("rank %d: got %v, want pg.ErrMismatch naming rank 1", r, err)
				}
			}
			// The ranks are still in step.
			for r, g := range groups {
				works[r] = g.Barrier(ctx)
			}
			for r, w := range works {
				if err := wait(t, w); err != nil {
					t.Errorf("rank %d: barrier after the mismatch: %v", r, err)
				}
			}
		})
	}
}

func TestTimeoutNamesEveryMissingRank(t *testing.T) {
	groups := start(t, 4, 100*time.Millisecond)
	err := wait(t, groups[2].AllReduce(context.Background(), f32(1), pg.Op(pg.Sum)))
	ce := wantCollErr(t, "rank 2", err, pg.ErrTimeout, 0)
	if ce.Rank != 2 || ce.Op != "allreduce" || !strings.Contains(err.Error(), "ranks [0 1 3]") {
		t.Errorf("got %v; want rank 2's allreduce naming ranks [0 1 3]", err)
	}
}

func TestLateRankFailsAtOnceAndRanksStayInStep(t *testing.T) {
	ctx := context.Background()
	const timeout = 2 * time.Second
	groups := start(t, 2, timeout)
	wantCollErr(t, "rank 0", wait(t, groups[0].AllReduce(ctx, f32(1), pg.Op(pg.Sum))), pg.ErrTimeout, 1)
	began := time.Now()
	late := wait(t, groups[1].AllReduce(ctx, f32(1), pg.Op(pg.Sum)))
	wantCollErr(t, "rank 1, late", late, pg.ErrRemote, 0)
	if took := time.Since(began); took > timeout/2 {
		t.Errorf("the late rank took %v to fail; want at once, not after a timeout", took)
	}
	bufs := []pg.Tensor{f32(1, 2), f32(10, 20)}
	w0, w1 := groups[0].AllReduce(ctx, bufs[0], pg.Op(pg.Sum)), groups[1].AllReduce(ctx, bufs[1], pg.Op(pg.Sum))
	if err := errors.Join(wait(t, w0), wait(t, w1)); err != nil {
		t.Fatal(err)
	}
	for r, b := range bufs {
		if v := pg.View[float32](b); v[0] != 11 || v[1] != 22 {
			t.Errorf("rank %d: got %v, want [11 22]", r, v)
		}
	}
}

func TestContextDeadlineBlamesTheRankThatGaveUp(t *testing.T) {
	groups := start(t, 3, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	patient := groups[1].AllReduce(context.Background(), f32(1), pg.Op(pg.Sum))
	err := wait(t, groups[0].AllReduce(ctx, f32(1), pg.Op(pg.Sum)))
	wantCollErr(t, "rank 0", err, pg.ErrTimeout, 2)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("rank 0: %v does not wrap context.DeadlineExceeded", err)
	}
	wantCollErr(t, "rank 1", wait(t, patient), pg.ErrRemote, 0)
}

func TestCloseFailsPendingAndFutureWork(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 3, time.Minute)
	var pending []pg.Work
	for range 3 {
		pending = append(pending, groups[1].AllReduce(ctx, f32(1), pg.Op(pg.Sum)))
	}
	waiting := groups[0].AllReduce(ctx, f32(1), pg.Op(pg.Sum))
	if err := groups[2].Close(); err != nil {
		t.Fatal(err)
	}
	if err := groups[2].Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	wantCollErr(t, "rank 0, waiting", wait(t, waiting), pg.ErrRemote, 2)
	wantCollErr(t, "rank 1, pending #0", wait(t, pending[0]), pg.ErrRemote, 2)
	for i, w := range pending[1:] {
		// Queued behind #0, they meet the closed rank's absence too.
		wantCollErr(t, fmt.Sprintf("rank 1, pending #%d", i+1), wait(t, w), pg.ErrRemote, 2)
	}
	wantCollErr(t, "rank 0, later", wait(t, groups[0].Barrier(ctx)), pg.ErrRemote, 2)
	wantCollErr(t, "rank 2, after Close", wait(t, groups[2].Barrier(ctx)), pg.ErrClosed, pg.NoPeer)
}

func TestAbortFailsOwnWorkAndTellsPeers(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 2, time.Minute)
	cause := errors.New("out of memory")
	// The first waits in its slot, the second in the worker's queue.
	mine := []pg.Work{groups[0].AllReduce(ctx, f32(1), pg.Op(pg.Sum)), groups[0].Barrier(ctx)}
	groups[0].Abort(cause)
	for i, w := range mine {
		err := wait(t, w)
		wantCollErr(t, fmt.Sprintf("rank 0, pending #%d", i), err, pg.ErrAborted, pg.NoPeer)
		if !errors.Is(err, cause) {
			t.Errorf("rank 0, pending #%d: %v does not wrap the cause", i, err)
		}
	}
	err := wait(t, groups[1].AllReduce(ctx, f32(1), pg.Op(pg.Sum)))
	wantCollErr(t, "rank 1", err, pg.ErrRemote, 0)
	if !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("rank 1: %v does not carry the abort's cause", err)
	}
}

func TestMonitoredBarrierDefaultsToGroupTimeout(t *testing.T) {
	groups := start(t, 2, 100*time.Millisecond)
	began := time.Now()
	err := groups[0].MonitoredBarrier(context.Background(), 0, true)
	var mr *pg.MissingRanksError
	if !errors.As(err, &mr) || len(mr.Missing) != 1 || mr.Missing[0] != 1 || mr.Rank != 0 {
		t.Fatalf("got %v, want rank 0 reporting rank 1 missing", err)
	}
	if took := time.Since(began); took < 100*time.Millisecond || took > 5*time.Second {
		t.Errorf("took %v, want about the group timeout 100ms", took)
	}
}

func TestMonitoredBarrierContextEnds(t *testing.T) {
	groups := start(t, 2, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := groups[0].MonitoredBarrier(ctx, time.Minute, true)
	if !errors.Is(err, pg.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want pg.ErrTimeout wrapping the context's deadline", err)
	}
}

func TestReduceScatterLeavesInput(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 2, time.Minute)
	ins := []pg.Tensor{f32(1, 2, 3, 4), f32(5, 6, 7, 8)}
	outs := []pg.Tensor{f32(0, 0), f32(0, 0)}
	w0 := groups[0].ReduceScatter(ctx, outs[0], ins[0], pg.Op(pg.Avg))
	w1 := groups[1].ReduceScatter(ctx, outs[1], ins[1], pg.Op(pg.Avg))
	if err := errors.Join(wait(t, w0), wait(t, w1)); err != nil {
		t.Fatal(err)
	}
	if got := pg.View[float32](outs[0]); got[0] != 3 || got[1] != 4 {
		t.Errorf("rank 0: got %v, want [3 4]", got)
	}
	if got := pg.View[float32](outs[1]); got[0] != 5 || got[1] != 6 {
		t.Errorf("rank 1: got %v, want [5 6]", got)
	}
	if got := pg.View[float32](ins[1]); got[0] != 5 || got[3] != 8 {
		t.Errorf("rank 1's input changed to %v", got)
	}
}

func TestManyInFlight(t *testing.T) {
	ctx := context.Background()
	const n, count = 3, 500
	groups := start(t, n, time.Minute)
	bufs := make([][]pg.Tensor, n)
	works := make([][]pg.Work, n)
	for r, g := range groups {
		for i := range count {
			b := f32(float32(r), float32(i))
			bufs[r] = append(bufs[r], b)
			works[r] = append(works[r], g.AllReduce(ctx, b, pg.Op(pg.Max)))
		}
	}
	for r := range groups {
		for i, w := range works[r] {
			if err := wait(t, w); err != nil {
				t.Fatalf("rank %d, #%d: %v", r, i, err)
			}
			if v := pg.View[float32](bufs[r][i]); v[0] != n-1 || v[1] != float32(i) {
				t.Fatalf("rank %d, #%d: got %v, want [%d %d]", r, i, v, n-1, i)
			}
		}
	}
}

func TestLogsFailuresWhenAsked(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	groups, err := local.New(2, local.Options{Timeout: 10 * time.Millisecond, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			_ = g.Close()
		}
	}()
	_ = wait(t, groups[0].Barrier(context.Background()))
	entries := logs.FilterMessage("collective failed").All()
	if len(entries) != 1 || entries[0].ContextMap()["rank"] != int64(0) {
		t.Fatalf("got log entries %v, want one failure logged by rank 0", logs.All())
	}
}
