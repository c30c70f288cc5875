package main

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/desync"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/nccl/nccltest"
	"github.com/goddp/ddp/pg/store"
)

// An NCCL group (on the binding's test double) wrapped as a worker wraps
// it, pg/desync, pg/instrument and the flight recorder (Note [flight
// recorder]), dumps the watchdog's times: each collective once, found
// completed when its end event passed (before Wait returned, though the
// ring first looks at it later), with the GPU duration from its timing
// events; and the group's FlightRecorder is the worker's recorder. Rank
// 1 issues lag after rank 0: without --debug-collectives rank 0's
// allreduce spends the lag on the device, with it in pg/desync's
// fingerprint check, before the device.
func TestFlightRecorderOfNCCLHasEventTimes(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "debug-collectives"}[check],
			func(t *testing.T) { ncclFlightTimes(t, check) })
	}
}

func ncclFlightTimes(t *testing.T, check bool) {
	w, err := nccltest.NewWorld(2, nccltest.Options{EnableTiming: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	}()
	c := config{timeout: time.Minute, debugColls: check}
	st := store.NewHashStore(store.HashStoreOptions{})
	recs := make([]*flight.Recorder, 2)
	for r, ng := range w.Groups {
		dg, err := desync.Wrap(ng, st, desyncOptions(c, pg.NoPeer, zap.NewNop()))
		if err != nil {
			t.Fatal(err)
		}
		g, err := instrument.Wrap(dg, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		rec, stop, err := wrapFlight(g, c, r, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		defer stop()
		if ng.FlightRecorder() != rec {
			t.Fatalf("rank %d: the NCCL group's FlightRecorder is not the worker's recorder", r)
		}
		recs[r] = rec
	}
	ctx := context.Background()
	const lag = 50 * time.Millisecond
	for range 2 {
		w0 := recs[0].AllReduce(ctx, pg.Float32s([]float32{1, 2}), pg.Op(pg.Sum))
		time.Sleep(lag)
		if err := pg.WaitAll(ctx, w0, recs[1].AllReduce(ctx, pg.Float32s([]float32{3, 4}), pg.Op(pg.Sum))); err != nil {
			t.Fatal(err)
		}
	}
	waited := time.Now().UnixNano()
	time.Sleep(20 * time.Millisecond)
	es := recs[0].Snapshot().Entries
	if len(es) != 2 {
		t.Fatalf("debug-collectives %v: %d entries, want 2 (one per allreduce)", check, len(es))
	}
	for i, e := range es {
		if e.State != "completed" || e.DurationMs == nil || *e.TimeDiscoveredCompletedNs > waited ||
			*e.TimeDiscoveredStartedNs < e.TimeCreatedNs ||
			*e.DurationMs > float64(*e.TimeDiscoveredCompletedNs-e.TimeCreatedNs)/1e6 {
			t.Fatalf("entry %d: %+v, want the watchdog's times", i, e)
		}
		t.Logf("entry %d: duration_ms %.3f", i, *e.DurationMs)
		if lagged := *e.DurationMs >= 0.9*float64(lag/time.Millisecond); lagged == check {
			t.Fatalf("entry %d: duration_ms %.3f with a lag of %v", i, *e.DurationMs, lag)
		}
	}
}
