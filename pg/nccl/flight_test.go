package nccl

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/nccl/internal/fake"
)

// wrapAll puts a pg/flight Recorder over every Group.
func wrapAll(t *testing.T, gs []*Group) []*flight.Recorder {
	t.Helper()
	recs := make([]*flight.Recorder, len(gs))
	for r, g := range gs {
		rec, err := flight.Wrap(g, flight.Options{})
		if err != nil {
			t.Fatal(err)
		}
		recs[r] = rec
	}
	return recs
}

// timingWorld is a fake world of two with Options.EnableTiming.
func timingWorld(t *testing.T, timing bool) []*Group {
	t.Helper()
	gs, _, cleanup, err := newFakeWorld(2, Options{EnableTiming: timing}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	t.Cleanup(func() { closeAll(t, gs) })
	return gs
}

// TestFlightEventTimes: a completed collective's pg/flight entry carries
// the watchdog's times, not the moment a poll of the Work noticed it:
// rank 0's allreduce waits about lag for rank 1 on the (fake) device, so
// its timing events are at least lag apart, which is its duration_ms;
// it was found started when its start event passed and completed when
// its end event passed, both before Wait returned, though the ring
// first looks at it at the dump, later. Each collective is recorded
// once: the group keeps no ring of its own.
func TestFlightEventTimes(t *testing.T) {
	const lag = 100 * time.Millisecond
	gs := timingWorld(t, true)
	recs := wrapAll(t, gs)
	ctx := context.Background()
	w0 := recs[0].AllReduce(ctx, pg.Float32s([]float32{1, 2}), pg.Op(pg.Sum))
	time.Sleep(lag)
	w1 := recs[1].AllReduce(ctx, pg.Float32s([]float32{3, 4}), pg.Op(pg.Sum))
	for _, w := range []pg.Work{w0, w1} {
		if err := waitErr(t, w, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	waited := time.Now().UnixNano()
	time.Sleep(50 * time.Millisecond) // a poll now would stamp later than waited
	es := recs[0].Snapshot().Entries
	if len(es) != 1 {
		t.Fatalf("%d entries, want 1: %+v", len(es), es)
	}
	e := es[0]
	if e.State != "completed" || !e.Retired || e.TimeDiscoveredStartedNs == nil || e.TimeDiscoveredCompletedNs == nil ||
		e.DurationMs == nil {
		t.Fatalf("entry %+v: want completed with started, completed and duration_ms", e)
	}
	started, completed, ms := *e.TimeDiscoveredStartedNs, *e.TimeDiscoveredCompletedNs, *e.DurationMs
	t.Logf("created %d, started +%v, completed +%v, duration_ms %.3f", e.TimeCreatedNs,
		time.Duration(started-e.TimeCreatedNs), time.Duration(completed-e.TimeCreatedNs), ms)
	if started < e.TimeCreatedNs || completed < started || completed > waited {
		t.Fatalf("created %d started %d completed %d, Wait returned at %d: want created <= started <= completed <= Wait's "+
			"return",
			e.TimeCreatedNs, started, completed, waited)
	}
	if ms < float64(lag/time.Millisecond)*0.9 || ms > float64(completed-e.TimeCreatedNs)/1e6 {
		t.Fatalf("duration_ms %.3f: want at least about %v (rank 1's lag) and at most completed-created (%v)",
			ms, lag, time.Duration(completed-e.TimeCreatedNs))
	}
	if es := recs[1].Snapshot().Entries; len(es) != 1 || es[0].DurationMs == nil || *es[0].DurationMs > ms {
		t.Fatalf("rank 1: %+v, want one entry whose duration is below rank 0's %.3f ms", es, ms)
	}
}

// TestFlightNoTimingNoDuration: without Options.EnableTiming, as torch
// without TORCH_NCCL_ENABLE_TIMING, duration_ms is absent; the started
// and completed times are still the watchdog's.
func TestFlightNoTimingNoDuration(t *testing.T) {
	gs := timingWorld(t, false)
	recs := wrapAll(t, gs)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		ws := []pg.Work{recs[0].AllReduce(ctx, pg.Float32s([]float32{1}), pg.Op(pg.Sum)),
			recs[1].AllReduce(ctx, pg.Float32s([]float32{1}), pg.Op(pg.Sum))}
		if err := pg.WaitAll(ctx, ws...); err != nil {
			t.Fatal(err)
		}
	}
	waited := time.Now().UnixNano()
	time.Sleep(20 * time.Millisecond)
	es := recs[0].Snapshot().Entries
	if len(es) != 3 {
		t.Fatalf("%d entries, want 3", len(es))
	}
	for i, e := range es {
		if e.State != "completed" || e.DurationMs != nil || *e.TimeDiscoveredCompletedNs > waited ||
			*e.TimeDiscoveredStartedNs < e.TimeCreatedNs || *e.TimeDiscoveredStartedNs > *e.TimeDiscoveredCompletedNs {
			t.Fatalf("entry %d: %+v", i, e)
		}
	}
}

// TestFlightWatchdogTimeoutDump: a collective that times out is dumped by
// the watchdog (Options.FlightDumpDir), in torch's layout, as torch shows
// one: started, retired, not completed, after the collective before it,
// which completed.
func TestFlightWatchdogTimeoutDump(t *testing.T) {
	dir := t.TempDir()
	gs, bs, cleanup, err := newFakeWorld(2,
		Options{Timeout: 300 * time.Millisecond, FlightDumpDir: dir, EnableTiming: true}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	defer closeAll(t, gs)
	recs := wrapAll(t, gs)
	ctx := context.Background()
	if err := pg.WaitAll(ctx, recs[0].Barrier(ctx), recs[1].Barrier(ctx)); err != nil {
		t.Fatal(err)
	}
	bs[0].StallNext()
	ws := []pg.Work{recs[0].AllReduce(ctx, pg.Float32s([]float32{1, 2}), pg.Op(pg.Sum)),
		recs[1].AllReduce(ctx, pg.Float32s([]float32{3, 4}), pg.Op(pg.Sum))}
	for r, w := range ws {
		if err := waitErr(t, w, 10*time.Second); !errors.Is(err, pg.ErrTimeout) {
			t.Fatalf("rank %d: %v, want a timeout", r, err)
		}
	}
	// The watchdog dumps after failing the Works: wait for both files.
	var dumps map[int]flight.Dump
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if dumps, err = flight.ReadDir(dir, ""); err == nil && len(dumps) == 2 {
			break
		}
	}
	if err != nil || len(dumps) != 2 {
		t.Fatalf("the watchdogs dumped %d ranks (%v), want 2", len(dumps), err)
	}
	for r, d := range dumps {
		if d.Version != flight.Version || len(d.Entries) != 2 {
			t.Fatalf("rank %d: %+v", r, d)
		}
		done, late := d.Entries[0], d.Entries[1]
		if done.State != "completed" || done.ProfilingName != "nccl:all_reduce_barrier" || done.DurationMs == nil {
			t.Fatalf("rank %d: the barrier: %+v", r, done)
		}
		if late.State != "started" || !late.Retired || late.TimeDiscoveredCompletedNs != nil || late.DurationMs != nil ||
			late.TimeDiscoveredStartedNs == nil || *late.TimeDiscoveredStartedNs < late.TimeCreatedNs ||
			late.ProfilingName != "nccl:all_reduce" || late.CollectiveSeqID != 2 {
			t.Fatalf("rank %d: the timed-out allreduce: %+v", r, late)
		}
		if s := d.PgStatus["0"]; s["last_completed_collective"] != "1" || s["last_started_collective"] != "2" {
			t.Fatalf("rank %d: pg_status %v", r, s)
		}
	}
}
