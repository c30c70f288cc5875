package flight_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/local"
)

// timed is a group whose backend knows when its allreduces ran, as
// pg/nccl's watchdog does: its Works are finished with CompleteAt, the
// odd ones failed. It is a flight.Attacher that asks for a ring of 3.
type timed struct {
	pg.ProcessGroup
	times    pg.OpTimes
	calls    int
	attached *flight.Recorder
}

func (g *timed) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	f := pg.NewFuture()
	g.calls++
	if g.calls%2 == 0 {
		f.CompleteAt(pg.ErrTimeout, pg.OpTimes{Started: g.times.Started})
	} else {
		f.CompleteAt(nil, g.times)
	}
	return f
}

func (g *timed) AttachFlight(r *flight.Recorder) { g.attached = r }
func (g *timed) FlightEntries() int              { return 3 }

// TestEventTimesFillTorchsFields: a Work's own times (pg.TimedWork) fill
// time_discovered_started_ns, time_discovered_completed_ns and
// duration_ms, a float of milliseconds as torch's cudaEventElapsedTime;
// a failed one keeps its start and is retired, not completed. Wrap
// gives the Attacher its Recorder and sizes the ring as it asks.
func TestEventTimesFillTorchsFields(t *testing.T) {
	groups, err := local.New(1, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Unix(0, 1_700_000_000_000_000_000)
	g := &timed{ProcessGroup: groups[0], times: pg.OpTimes{
		Started: started, Completed: started.Add(3 * time.Millisecond), Duration: 2500 * time.Microsecond}}
	rec, err := flight.Wrap(g, flight.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if g.attached != rec {
		t.Fatal("Wrap did not attach its Recorder to the group")
	}
	for range 5 {
		_ = rec.AllReduce(context.Background(), pg.Float32s([]float32{1}), pg.Op(pg.Sum))
	}
	es := rec.Snapshot().Entries
	if len(es) != 3 {
		t.Fatalf("%d entries, want the ring of 3 the group asked for", len(es))
	}
	ok, failed := es[2], es[1] // calls 5 and 4
	if ok.State != "completed" || *ok.TimeDiscoveredStartedNs != started.UnixNano() ||
		*ok.TimeDiscoveredCompletedNs != started.Add(3*time.Millisecond).UnixNano() || ok.DurationMs == nil ||
		*ok.DurationMs != 2.5 {
		t.Fatalf("completed entry %+v", ok)
	}
	if failed.State != "started" || !failed.Retired || failed.TimeDiscoveredCompletedNs != nil ||
		*failed.TimeDiscoveredStartedNs != started.UnixNano() || failed.DurationMs != nil {
		t.Fatalf("failed entry %+v", failed)
	}
	var buf bytes.Buffer
	if err := rec.Dump(&buf); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	var top struct{ Entries []map[string]any }
	if err := dec.Decode(&top); err != nil {
		t.Fatal(err)
	}
	if d, isNum := top.Entries[2]["duration_ms"].(json.Number); !isNum || d.String() != "2.5" {
		t.Fatalf("duration_ms is %#v, want the number 2.5", top.Entries[2]["duration_ms"])
	}
	if _, has := top.Entries[1]["duration_ms"]; has {
		t.Fatal("a failed entry has duration_ms; torch writes it only when measured")
	}
}
