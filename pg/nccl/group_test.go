package nccl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/flight"
)

func closeAll(t testing.TB, gs []*Group) {
	t.Helper()
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Go(func() { _ = g.Close() })
	}
	wg.Wait()
}

func waitErr(t testing.TB, w pg.Work, limit time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	select {
	case <-w.Done():
		return w.Err()
	case <-ctx.Done():
		t.Fatalf("Work did not finish within %v", limit)
		return nil
	}
}

func seqFloats(n int, base float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = base + float32(i)
	}
	return s
}

// TestCollectivesOverFake checks every collective's staging and NCCL call
// sequence on a world of 3 against hand-computed results.
func TestCollectivesOverFake(t *testing.T) {
	const n = 3
	gs, _ := fakeWorld(t, n, 10*time.Second)
	defer closeAll(t, gs)
	ctx := context.Background()
	run := func(what string, f func(r int, g *Group) pg.Work) {
		t.Helper()
		ws := make([]pg.Work, n)
		for r, g := range gs {
			ws[r] = f(r, g)
		}
		for r, w := range ws {
			if err := waitErr(t, w, 10*time.Second); err != nil {
				t.Fatalf("%s: rank %d: %v", what, r, err)
			}
		}
	}
	// AllReduce SUM, AVG, PREMUL_SUM and BXOR.
	bufs := make([][]float32, n)
	run("allreduce", func(r int, g *Group) pg.Work {
		bufs[r] = seqFloats(5, float32(r))
		return g.AllReduce(ctx, pg.Float32s(bufs[r]), pg.Op(pg.Sum))
	})
	for r := range bufs {
		for i, v := range bufs[r] {
			if want := float32(3*i + 3); v != want {
				t.Fatalf("allreduce rank %d [%d] = %v, want %v", r, i, v, want)
			}
		}
	}
	run("premul", func(r int, g *Group) pg.Work {
		bufs[r] = []float32{2}
		return g.AllReduce(ctx, pg.Float32s(bufs[r]), pg.PremulSumOp(0.5))
	})
	if bufs[2][0] != 3 {
		t.Fatalf("premul sum = %v, want 3", bufs[2][0])
	}
	ints := make([][]int32, n)
	run("bxor", func(r int, g *Group) pg.Work {
		ints[r] = []int32{1 << r, 7}
		return g.AllReduce(ctx, pg.Int32s(ints[r]), pg.Op(pg.Bxor))
	})
	if ints[1][0] != 7 || ints[1][1] != 7 {
		t.Fatalf("bxor = %v, want [7 7]", ints[1])
	}
	// Broadcast from 1.
	run("broadcast", func(r int, g *Group) pg.Work {
		bufs[r] = []float32{float32(r)}
		return g.Broadcast(ctx, pg.Float32s(bufs[r]), 1)
	})
	if bufs[0][0] != 1 || bufs[2][0] != 1 {
		t.Fatalf("broadcast: %v", bufs)
	}
	// AllGather, ReduceScatter (BAND through the host path too).
	outs := make([][]float32, n)
	run("allgather", func(r int, g *Group) pg.Work {
		outs[r] = make([]float32, 2*n)
		return g.AllGather(ctx, pg.Float32s(outs[r]), pg.Float32s([]float32{float32(r), float32(10 * r)}))
	})
	if fmt.Sprint(outs[2]) != "[0 0 1 10 2 20]" {
		t.Fatalf("allgather = %v", outs[2])
	}
	run("reducescatter", func(r int, g *Group) pg.Work {
		outs[r] = make([]float32, 1)
		return g.ReduceScatter(ctx, pg.Float32s(outs[r]), pg.Float32s([]float32{1, 2, 3}), pg.Op(pg.Max))
	})
	if outs[0][0] != 1 || outs[2][0] != 3 {
		t.Fatalf("reducescatter: %v", outs)
	}
	run("reducescatter band", func(r int, g *Group) pg.Work {
		ints[r] = make([]int32, 1)
		return g.ReduceScatter(ctx, pg.Int32s(ints[r]), pg.Int32s([]int32{int32(3 | r<<2), 5, 6}), pg.Op(pg.Band))
	})
	if ints[0][0] != 3 || ints[1][0] != 5 {
		t.Fatalf("reducescatter band: %v", ints)
	}
	// Rooted and alltoall through grouped send/recv.
	run("reduce", func(r int, g *Group) pg.Work {
		bufs[r] = []float32{float32(r + 1)}
		return g.Reduce(ctx, pg.Float32s(bufs[r]), 2, pg.Op(pg.Product))
	})
	if bufs[2][0] != 6 || bufs[0][0] != 1 {
		t.Fatalf("reduce: %v", bufs)
	}
	run("gather", func(r int, g *Group) pg.Work {
		outs[r] = make([]float32, n)
		return g.Gather(ctx, pg.Float32s(outs[r]), pg.Float32s([]float32{float32(r + 5)}), 0)
	})
	if fmt.Sprint(outs[0]) != "[5 6 7]" || fmt.Sprint(outs[1]) != "[0 0 0]" {
		t.Fatalf("gather: %v", outs)
	}
	run("scatter", func(r int, g *Group) pg.Work {
		bufs[r] = make([]float32, 1)
		return g.Scatter(ctx, pg.Float32s(bufs[r]), pg.Float32s([]float32{7, 8, 9}), 1)
	})
	if bufs[0][0] != 7 || bufs[2][0] != 9 {
		t.Fatalf("scatter: %v", bufs)
	}
	// Uneven alltoall: rank r sends r+1 elements of value 10r+j to rank j.
	run("alltoall", func(r int, g *Group) pg.Work {
		var in []float32
		inS := make([]int, n)
		for j := 0; j < n; j++ {
			inS[j] = r + 1
			for k := 0; k <= r; k++ {
				in = append(in, float32(10*r+j))
			}
		}
		outS := []int{1, 2, 3}
		outs[r] = make([]float32, 6)
		return g.AllToAll(ctx, pg.Float32s(outs[r]), pg.Float32s(in), outS, inS)
	})
	if fmt.Sprint(outs[1]) != "[1 11 11 21 21 21]" {
		t.Fatalf("alltoall rank 1 = %v", outs[1])
	}
	// Coalesced allreduce and a barrier.
	run("coalesced", func(r int, g *Group) pg.Work {
		bufs[r] = []float32{1, 2}
		return g.AllReduceCoalesced(ctx, []pg.Tensor{pg.Float32s(bufs[r][:1]), pg.Float32s(bufs[r][1:])}, pg.Op(pg.Sum))
	})
	if bufs[0][0] != 3 || bufs[0][1] != 6 {
		t.Fatalf("coalesced: %v", bufs[0])
	}
	run("barrier", func(r int, g *Group) pg.Work { return g.Barrier(ctx) })
	// Point to point, in matching order.
	got := make([]float32, 2)
	run("sendrecv", func(r int, g *Group) pg.Work {
		switch r {
		case 0:
			return g.Send(ctx, pg.Float32s([]float32{4, 2}), 2, 0)
		case 2:
			return g.Recv(ctx, pg.Float32s(got), 0, 0)
		}
		return pg.Completed(nil)
	})
	if got[0] != 4 || got[1] != 2 {
		t.Fatalf("recv = %v", got)
	}
}

// TestWatchdogTimeout: a collective that never finishes on the device
// fails on every rank with pg.ErrTimeout naming the collective and its
// sequence number, after about the group timeout; the communicator is
// aborted, the caller's tensor is left untouched, later calls fail at
// once, and the pg/flight Recorder over the group is logged.
func TestWatchdogTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	core, logs := observer.New(zap.DebugLevel)
	gs, bs := fakeWorld(t, 2, timeout)
	gs[0].log = zap.New(core)
	defer closeAll(t, gs)
	rec, err := flight.Wrap(gs[0], flight.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A collective that completes first, then one that stalls on rank 0.
	_ = rec.Barrier(ctx)
	_ = gs[1].Barrier(ctx)
	bs[0].StallNext()
	data := [][]float32{{1, 2}, {3, 4}}
	start := time.Now()
	ws := []pg.Work{rec.AllReduce(ctx, pg.Float32s(data[0]), pg.Op(pg.Sum)),
		gs[1].AllReduce(ctx, pg.Float32s(data[1]), pg.Op(pg.Sum))}
	for r, w := range ws {
		err := waitErr(t, w, 10*time.Second)
		var ce *pg.CollectiveError
		// Rank 0 stalls and issued first, so its watchdog fires first and
		// aborts; rank 1 then fails on its own timeout or, if the abort
		// reaches it sooner, on the remote error (ncclRemoteError), as a
		// real peer of an aborted communicator may.
		timedOut := errors.Is(err, pg.ErrTimeout) || (r == 1 && errors.Is(err, pg.ErrRemote))
		if !timedOut || !errors.As(err, &ce) || ce.Op != "allreduce" || !strings.Contains(err.Error(), "seq 2") {
			t.Fatalf("rank %d: %v, want a timeout of allreduce seq 2", r, err)
		}
		if w.Seq() != 2 {
			t.Fatalf("rank %d: Seq %d", r, w.Seq())
		}
	}
	if d := time.Since(start); d < timeout*9/10 || d > timeout+2*time.Second {
		t.Fatalf("failed after %v, want about %v", d, timeout)
	}
	if data[0][0] != 1 || data[1][1] != 4 {
		t.Fatalf("a failed collective wrote the caller's tensors: %v", data)
	}
	if !bs[0].Aborted() || !bs[1].Aborted() {
		t.Fatal("the communicators were not aborted")
	}
	if err := waitErr(t, gs[0].Barrier(ctx), time.Second); !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("a call after the failure: %v", err)
	}
	// The watchdog logs the recorder after failing the Works: wait for it.
	for deadline := time.Now().Add(5 * time.Second); logs.FilterMessage("nccl flight recorder").Len() < 2 &&
		time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if logs.FilterMessage("nccl flight recorder").Len() != 2 {
		t.Fatalf("flight recorder dump has %d entries, want 2 (barrier, allreduce)",
			logs.FilterMessage("nccl flight recorder").Len())
	}
	if gs[0].FlightRecorder() != rec || gs[1].FlightRecorder() != nil {
		t.Fatal("FlightRecorder is not the Recorder flight.Wrap put over the group")
	}
	fr := rec.Snapshot().Entries
	if len(fr) != 2 || fr[0].State != "completed" || fr[1].State != "started" || !fr[1].Retired ||
		fr[1].ProfilingName != "nccl:all_reduce" || fr[1].InputSizes[0][0] != 2 {
		t.Fatalf("flight recorder: %+v", fr)
	}
}

// TestContextEndsCollective: ending a Work's ctx fails it and aborts.
func TestContextEndsCollective(t *testing.T) {
	gs, bs := fakeWorld(t, 1, time.Minute)
	defer closeAll(t, gs)
	bs[0].StallNext()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := waitErr(t, gs[0].AllReduce(ctx, pg.Float32s([]float32{1}), pg.Op(pg.Sum)), 5*time.Second)
	if !errors.Is(err, pg.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
}

// TestAsyncErrorFailsPending: an asynchronous NCCL error (a peer died)
// fails every pending Work with pg.ErrRemote and aborts.
func TestAsyncErrorFailsPending(t *testing.T) {
	gs, bs := fakeWorld(t, 1, time.Minute)
	defer closeAll(t, gs)
	ctx := context.Background()
	bs[0].StallNext()
	w1 := gs[0].AllReduce(ctx, pg.Float32s([]float32{1}), pg.Op(pg.Sum))
	w2 := gs[0].Broadcast(ctx, pg.Float32s([]float32{1}), 0)
	bs[0].InjectAsyncError(libnccl.RemoteError, "peer rank 3 exited")
	for i, w := range []pg.Work{w1, w2} {
		err := waitErr(t, w, 5*time.Second)
		if !errors.Is(err, pg.ErrRemote) || !errors.Is(err, libnccl.RemoteError) ||
			!strings.Contains(err.Error(), "peer rank 3 exited") {
			t.Fatalf("work %d: %v", i, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("seq %d", i+1)) {
			t.Fatalf("work %d: %v does not name its seq", i, err)
		}
	}
	if !bs[0].Aborted() {
		t.Fatal("not aborted")
	}
}

func TestAbort(t *testing.T) {
	gs, bs := fakeWorld(t, 1, time.Minute)
	defer closeAll(t, gs)
	bs[0].StallNext()
	w := gs[0].AllReduce(context.Background(), pg.Float32s([]float32{1}), pg.Op(pg.Sum))
	cause := errors.New("operator pressed stop")
	gs[0].Abort(cause)
	err := waitErr(t, w, 5*time.Second)
	if !errors.Is(err, pg.ErrAborted) || !errors.Is(err, cause) || !bs[0].Aborted() {
		t.Fatalf("%v", err)
	}
}

// TestEnqueueFailure: an NCCL call that fails at enqueue fails the Work
// and the group (the ranks are out of step), mapped to pg's sentinel.
func TestEnqueueFailure(t *testing.T) {
	gs, bs := fakeWorld(t, 1, time.Minute)
	defer closeAll(t, gs)
	bs[0].FailNext(&libnccl.Error{Func: "ncclAllReduce", Code: libnccl.InvalidUsage})
	err := waitErr(t, gs[0].AllReduce(context.Background(), pg.Float32s([]float32{1}), pg.Op(pg.Sum)), 5*time.Second)
	if !errors.Is(err, pg.ErrInvalidArgument) || !errors.Is(err, libnccl.InvalidUsage) {
		t.Fatalf("%v", err)
	}
	if err := waitErr(t, gs[0].Barrier(context.Background()), time.Second); err == nil {
		t.Fatal("the group still works after a failed enqueue")
	}
}

func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{&libnccl.Error{Code: libnccl.RemoteError}, pg.ErrRemote},
		{&libnccl.Error{Code: libnccl.SystemError}, pg.ErrComm},
		{&libnccl.Error{Code: libnccl.InvalidArgument}, pg.ErrInvalidArgument},
		{&libnccl.Error{Code: libnccl.Timeout}, pg.ErrTimeout},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), pg.ErrTimeout},
		{&libnccl.CUDAError{Func: "cuMemAlloc", Code: 2}, pg.ErrComm},
	} {
		if got := kindOf(c.err); got != c.want {
			t.Errorf("kindOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestStagingPool: buffers are reused, and Close frees every one.
func TestStagingPool(t *testing.T) {
	gs, bs := fakeWorld(t, 1, time.Minute)
	for i := 0; i < 50; i++ {
		x := []float32{float32(i)}
		if err := waitErr(t, gs[0].AllReduce(context.Background(), pg.Float32s(x), pg.Op(pg.Sum)),
			5*time.Second); err != nil || x[0] != float32(i) {
			t.Fatal(err, x)
		}
	}
	if n := gs[0].pool.allocated(); n != 1 {
		t.Fatalf("50 sequential allreduces made %d staging buffers, want 1", n)
	}
	closeAll(t, gs)
	if bs[0].Freed() != 1 || !bs[0].Closed() {
		t.Fatalf("Close freed %d buffers", bs[0].Freed())
	}
}

// TestSeqAndHooks: Works are numbered from 1 per group, the same on every
// rank, and completion hooks see every Work in order.
func TestSeqAndHooks(t *testing.T) {
	gs, _ := fakeWorld(t, 2, time.Minute)
	defer closeAll(t, gs)
	var mu sync.Mutex
	var infos []pg.WorkInfo
	gs[1].OnCompletion(func(i pg.WorkInfo) { mu.Lock(); infos = append(infos, i); mu.Unlock() })
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		var ws []pg.Work
		for _, g := range gs {
			ws = append(ws, g.AllReduce(ctx, pg.Float64s([]float64{1, 2}), pg.Op(pg.Sum)))
		}
		for _, w := range ws {
			if err := waitErr(t, w, 5*time.Second); err != nil || w.Seq() != uint64(i+1) {
				t.Fatalf("seq %d: %v", w.Seq(), err)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(infos)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(infos) != 3 || infos[2].Seq != 3 || infos[0].Op != pg.OpAllReduce || infos[0].InBytes != 16 ||
		infos[0].Dtype != pg.Float64 || infos[0].Rank != 1 {
		t.Fatalf("%+v", infos)
	}
}

func TestSplitOverFake(t *testing.T) {
	gs, _ := fakeWorld(t, 4, 10*time.Second)
	defer closeAll(t, gs)
	subs := make([]pg.ProcessGroup, 4)
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() {
			color := r % 2
			if r == 3 {
				color = pg.NoColor
			}
			s, err := g.Split(context.Background(), color, -r)
			if err != nil {
				t.Error(err)
			}
			subs[r] = s
		})
	}
	wg.Wait()
	if subs[3] != nil || subs[0].Size() != 2 || subs[0].Rank() != 1 || subs[2].Rank() != 0 || subs[1].Size() != 1 {
		t.Fatalf("split: %v", subs)
	}
	x := [][]float32{{1}, nil, {5}}
	w0 := subs[0].AllReduce(context.Background(), pg.Float32s(x[0]), pg.Op(pg.Sum))
	w2 := subs[2].AllReduce(context.Background(), pg.Float32s(x[2]), pg.Op(pg.Sum))
	if err := errors.Join(waitErr(t, w0, 5*time.Second), waitErr(t, w2, 5*time.Second)); err != nil || x[0][0] != 6 ||
		w0.Seq() != 1 {
		t.Fatal(err, x)
	}
	for _, s := range subs {
		if s != nil {
			_ = s.Close()
		}
	}
}

func TestMonitoredBarrierOverFake(t *testing.T) {
	gs, _ := fakeWorld(t, 3, 10*time.Second)
	defer closeAll(t, gs)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ { // rank 2 is absent
		wg.Go(func() { errs[r] = gs[r].MonitoredBarrier(context.Background(), 200*time.Millisecond, true) })
	}
	wg.Wait()
	for r, err := range errs {
		var mr *pg.MissingRanksError
		if !errors.As(err, &mr) || fmt.Sprint(mr.Missing) != "[2]" {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func TestNewNeedsLibraries(t *testing.T) {
	_, err := New(context.Background(), nil, Options{Rank: 0, Size: 1})
	if !errors.Is(err, pg.ErrInvalidArgument) || !strings.Contains(err.Error(), "nccl.Load") {
		t.Fatalf("%v", err)
	}
	_, err = New(context.Background(), nil, Options{Rank: 2, Size: 2})
	if !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("%v", err)
	}
}

// TestOneRankPremulSum: on a world of one PREMUL_SUM is done on the host
// (NCCL's one-rank path left odd tails unscaled on the GPU), for every
// float dtype and through AllReduce, Reduce and ReduceScatter.
func TestOneRankPremulSum(t *testing.T) {
	gs, bs := fakeWorld(t, 1, time.Minute)
	defer closeAll(t, gs)
	ctx := context.Background()
	x := make([]float64, 4099)
	for i := range x {
		x[i] = float64(i)
	}
	if err := waitErr(t, gs[0].AllReduce(ctx, pg.Float64s(x), pg.PremulSumOp(0.5)), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if x[4098] != 2049 || x[1] != 0.5 {
		t.Fatalf("x[1], x[4098] = %v, %v", x[1], x[4098])
	}
	h := []uint16{backend.F32ToF16(3)}
	if err := waitErr(t, gs[0].Reduce(ctx, pg.Float16s(h), 0, pg.PremulSumOp(2)), 5*time.Second); err != nil ||
		backend.F16ToF32(h[0]) != 6 {
		t.Fatal(err, backend.F16ToF32(h[0]))
	}
	out := []uint16{0}
	if err := waitErr(t,
		gs[0].ReduceScatter(ctx, pg.BFloat16s(out), pg.BFloat16s([]uint16{backend.F32ToBF16(4)}), pg.PremulSumOp(0.25)),
		5*time.Second); err != nil || backend.BF16ToF32(out[0]) != 1 {
		t.Fatal(err, backend.BF16ToF32(out[0]))
	}
	if n := bs[0].Calls(); n != 0 {
		t.Fatalf("%d NCCL calls for one-rank PREMUL_SUM, want 0", n)
	}
}
