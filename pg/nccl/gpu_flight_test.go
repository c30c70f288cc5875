package nccl

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
)

// TestGPUFlightEventTimes runs the event-time path on a real
// GPU: with Options.EnableTiming each collective's flight-recorder entry
// gets torch's started and completed times from CUDA events the watchdog
// found passed, and duration_ms from cuEventElapsedTime. At world size 1
// an AVG allreduce of a device tensor still runs NCCL's one-rank kernel
// over every element (a SUM in place moves nothing), so duration_ms must
// grow with the tensor; it must also fit inside the host's window from
// the entry's creation to its completion. The GPU-FLIGHT lines are the
// figures for docs/nccl.md.
func TestGPUFlightEventTimes(t *testing.T) {
	gs := gpuWorldWith(t, 1, Options{Timeout: time.Minute, EnableTiming: true})
	g := gs[0]
	defer g.Close()
	_, cu, _ := libs(t)
	d, err := cu.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rec, err := flight.Wrap(g, flight.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Warm up outside the recorder: the first launch of NCCL's one-rank
	// kernel loads its module (CUDA's lazy loading) between the events,
	// 0.22 ms for a 4 KiB AVG on an H100 (2026-11-26).
	w := devFloats(t, d, make([]float32, 1024))
	for _, op := range []pg.ReduceKind{pg.Sum, pg.Avg} {
		if err := waitErr(t, g.AllReduce(ctx, w, pg.Op(op)), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	type run struct {
		bytes int
		op    pg.ReduceKind
		wall  time.Duration
	}
	var runs []run
	for _, bytes := range []int{4 << 10, 64 << 20, 1 << 30} {
		x := devFloats(t, d, make([]float32, bytes/4))
		for _, op := range []pg.ReduceKind{pg.Sum, pg.Avg} {
			start := time.Now()
			if err := waitErr(t, rec.AllReduce(ctx, x, pg.Op(op)), time.Minute); err != nil {
				t.Fatal(err)
			}
			runs = append(runs, run{bytes, op, time.Since(start)})
		}
	}
	waited := time.Now().UnixNano()
	es := rec.Snapshot().Entries
	if len(es) != len(runs) {
		t.Fatalf("%d entries for %d allreduces", len(es), len(runs))
	}
	ms := make([]float64, len(es))
	for i, e := range es {
		r := runs[i]
		if e.State != "completed" || e.DurationMs == nil || e.TimeDiscoveredStartedNs == nil ||
			e.TimeDiscoveredCompletedNs == nil {
			t.Fatalf("%d B %v: entry %+v, want completed with started, completed and duration_ms", r.bytes, r.op, e)
		}
		started, completed := *e.TimeDiscoveredStartedNs, *e.TimeDiscoveredCompletedNs
		ms[i] = *e.DurationMs
		fmt.Printf(
			"GPU-FLIGHT allreduce %-3v %11d B duration_ms %9.4f started +%-10v completed +%-10v Wait returned after %v\n",
			r.op, r.bytes, ms[i], time.Duration(started-e.TimeCreatedNs), time.Duration(completed-e.TimeCreatedNs), r.wall)
		if started < e.TimeCreatedNs || completed < started || completed > waited {
			t.Fatalf("%d B %v: created %d started %d completed %d, all Waits returned by %d", r.bytes, r.op, e.TimeCreatedNs,
				started, completed, waited)
		}
		if ms[i] <= 0 || ms[i] > float64(completed-e.TimeCreatedNs)/1e6 {
			t.Fatalf("%d B %v: duration_ms %.4f, want above 0 and at most completed-created (%v)", r.bytes, r.op, ms[i],
				time.Duration(completed-e.TimeCreatedNs))
		}
	}
	// runs: 4 KiB sum, 4 KiB avg, 64 MiB sum, 64 MiB avg, 1 GiB sum, 1 GiB avg.
	// The kernel moves 2 GiB for 1 GiB, 16 times what it moves for
	// 64 MiB; launch costs blur the ratio at 64 MiB, so ask for 4.
	if mid, big := ms[3], ms[5]; big < 4*mid || big < 0.1 {
		t.Fatalf("duration_ms of a 1 GiB AVG %.4f against a 64 MiB AVG %.4f: want the GPU time of the kernel over 1 GiB "+
			"(above 0.1 ms, 4x the 64 MiB one)", big, mid)
	}
	fmt.Printf("GPU-FLIGHT 1 GiB AVG: %.1f GB/s read+written by NCCL's one-rank kernel (from duration_ms)\n",
		2*float64(1<<30)/ms[5]/1e6)
}

// TestGPUFlightDumpOnTimeout: Options.FlightDumpDir on a real
// communicator. A group timeout far shorter than a 256 MiB staged
// allreduce fires the watchdog, which fails the Work and writes
// nccl_trace_rank_0 in torch's layout, the timed-out allreduce in it not
// completed.
func TestGPUFlightDumpOnTimeout(t *testing.T) {
	dir := t.TempDir()
	gs := gpuWorldWith(t, 1, Options{Timeout: time.Microsecond, EnableTiming: true, FlightDumpDir: dir})
	g := gs[0]
	rec, err := flight.Wrap(g, flight.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 64<<20)
	if err := waitErr(t, rec.AllReduce(context.Background(), pg.Float32s(x), pg.Op(pg.Sum)), time.Minute); !errors.Is(err,
		pg.ErrTimeout) {
		t.Fatalf("%v, want a timeout", err)
	}
	var dumps map[int]flight.Dump
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if dumps, err = flight.ReadDir(dir, ""); err == nil && len(dumps) == 1 {
			break
		}
	}
	if err != nil || len(dumps) != 1 {
		t.Fatalf("the watchdog dumped %d ranks (%v), want 1", len(dumps), err)
	}
	es := dumps[0].Entries
	if dumps[0].Version != flight.Version || len(es) != 1 || es[0].State == "completed" ||
		es[0].TimeDiscoveredCompletedNs != nil ||
		es[0].DurationMs != nil || es[0].ProfilingName != "nccl:all_reduce" {
		t.Fatalf("dump %+v", dumps[0])
	}
	fmt.Printf("GPU-FLIGHT dump on timeout: %s/nccl_trace_rank_0, entry state %q, started %v\n", dir, es[0].State,
		es[0].TimeDiscoveredStartedNs != nil)
	if err := g.Close(); err != nil {
		t.Logf("Close after abort: %v", err)
	}
}
