package flight_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/pgtest"
)

// recorded is a local world of n ranks, each behind a Recorder.
func recorded(t testing.TB, n int, o flight.Options) []*flight.Recorder {
	t.Helper()
	groups, err := local.New(n, local.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*flight.Recorder, n)
	for r, g := range groups {
		if out[r], err = flight.Wrap(g, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// onEach runs fn on every rank at once and fails t with the first error.
func onEach(t *testing.T, rs []*flight.Recorder, fn func(ctx context.Context, r int, g *flight.Recorder) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for r, g := range rs {
		wg.Go(func() { errs[r] = fn(ctx, r, g) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// Every call through a Recorder is recorded, with torch's name, sizes
// and dtypes: the collectives on the Recorder, the abilities pg.As
// finds on it (sends and receives among them), and the collectives of
// subgroups it makes, into the same ring.
func TestRecordsThroughEveryAbility(t *testing.T) {
	rs := recorded(t, 2, flight.Options{Timeout: time.Second})
	onEach(t, rs, func(ctx context.Context, r int, g *flight.Recorder) error {
		var (
			p2p pg.PointToPoint
			rt  pg.Rooted
			co  pg.Coalescer
			a2a pg.AllToAller
			sp  pg.Splitter
		)
		if !pg.As(g, &p2p) || !pg.As(g, &rt) || !pg.As(g, &co) || !pg.As(g, &a2a) || !pg.As(g, &sp) {
			return fmt.Errorf("an ability of the local group is not found through the Recorder")
		}
		f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
		ws := []pg.Work{
			g.AllReduce(ctx, f32(16), pg.Op(pg.Sum)),
			g.Broadcast(ctx, pg.NewTensor(pg.Float64, 4), 0),
			g.AllGather(ctx, f32(4), f32(2)),
			g.ReduceScatter(ctx, f32(1), f32(2), pg.Op(pg.Sum)),
			g.Barrier(ctx),
			rt.Reduce(ctx, f32(3), 0, pg.Op(pg.Sum)),
			a2a.AllToAll(ctx, f32(4), f32(4), nil, nil),
			co.AllReduceCoalesced(ctx, []pg.Tensor{f32(1), f32(2)}, pg.Op(pg.Sum)),
		}
		if r == 0 {
			ws = append(ws, p2p.Send(ctx, f32(5), 1, 0))
		} else {
			ws = append(ws, p2p.Recv(ctx, f32(5), 0, 0))
		}
		if err := pg.WaitAll(ctx, ws...); err != nil {
			return err
		}
		sub, err := sp.NewGroup(ctx, []int{0, 1})
		if err != nil {
			return err
		}
		defer sub.Close()
		return sub.AllReduce(ctx, f32(7), pg.Op(pg.Sum)).Wait(ctx)
	})
	d := rs[1].Snapshot()
	want := []string{"nccl:all_reduce", "nccl:broadcast", "nccl:all_gather", "nccl:_reduce_scatter_base",
		"nccl:all_reduce_barrier", "nccl:reduce", "nccl:all_to_all", "nccl:allreduce_coalesced", "nccl:recv 1<-0",
		"nccl:all_reduce"}
	if len(d.Entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(d.Entries), len(want), d.Entries)
	}
	for i, e := range d.Entries {
		if e.ProfilingName != want[i] || e.State != "completed" || e.RecordID != uint64(i) {
			t.Errorf("entry %d: %s %s record %d, want %s completed record %d", i, e.ProfilingName, e.State, e.RecordID, want[i],
				i)
		}
	}
	if e := d.Entries[2]; fmt.Sprint(e.InputSizes, e.OutputSizes, e.InputDtypes) != "[[2]] [[4]] [Float]" {
		t.Errorf("all_gather's sizes and dtypes: %v %v %v", e.InputSizes, e.OutputSizes, e.InputDtypes)
	}
	if e := d.Entries[8]; !e.IsP2P || e.P2PSeqID != 1 || e.CollectiveSeqID != 0 {
		t.Errorf("recv: is_p2p %v p2p_seq_id %d collective_seq_id %d", e.IsP2P, e.P2PSeqID, e.CollectiveSeqID)
	}
	if e := d.Entries[9]; e.ProcessGroup != [2]string{"0.1", "subgroup"} || e.CollectiveSeqID != 1 || e.PgID != 1 {
		t.Errorf("subgroup's allreduce: %v seq %d pg_id %d", e.ProcessGroup, e.CollectiveSeqID, e.PgID)
	}
	if c := d.PgConfig["0.1"]; c.Ranks != "[0, 1]" {
		t.Errorf("subgroup's pg_config: %+v", c)
	}
	if s := d.PgStatus["0"]; s["last_completed_collective"] != "8" {
		t.Errorf("pg_status: %v", d.PgStatus)
	}
}

// The ring keeps the last Entries operations.
func TestRingKeepsTheLast(t *testing.T) {
	rs := recorded(t, 1, flight.Options{Entries: 4})
	ctx := context.Background()
	for range 10 {
		if err := rs[0].AllReduce(ctx, pg.Float32s([]float32{1}), pg.Op(pg.Sum)).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	d := rs[0].Snapshot()
	if len(d.Entries) != 4 || d.Entries[0].RecordID != 6 || d.Entries[3].CollectiveSeqID != 10 {
		t.Fatalf("entries: %+v", d.Entries)
	}
}

// Wrap refuses what it cannot record.
func TestWrapRefuses(t *testing.T) {
	groups, err := local.New(2, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer groups[0].Close()
	defer groups[1].Close()
	for _, o := range []flight.Options{{Entries: -1}, {Ranks: []int{0}}} {
		if _, err := flight.Wrap(groups[0], o); err == nil {
			t.Errorf("Wrap with %+v: no error", o)
		}
	}
	if _, err := flight.Wrap(nil, flight.Options{}); err == nil {
		t.Error("Wrap of nil: no error")
	}
}

// A collective that times out calls OnFailure once with pg.ErrTimeout,
// and stays in the dump as started and retired, as torch shows a
// timed-out collective.
func TestTimeoutCallsOnFailure(t *testing.T) {
	groups, err := local.New(2, local.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer groups[1].Close()
	var (
		mu   sync.Mutex
		errs []error
	)
	rec, err := flight.Wrap(groups[0], flight.Options{OnFailure: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	ctx := context.Background()
	w := rec.AllReduce(ctx, pg.Float32s([]float32{1}), pg.Op(pg.Sum)) // rank 1 never comes
	if err := w.Wait(ctx); !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("Wait: %v, want pg.ErrTimeout", err)
	}
	w.Err()
	mu.Lock()
	if len(errs) != 1 || !errors.Is(errs[0], pg.ErrTimeout) {
		t.Errorf("OnFailure got %v, want one pg.ErrTimeout", errs)
	}
	mu.Unlock()
	e := rec.Snapshot().Entries[0]
	if e.State != "started" || !e.Retired || e.TimeDiscoveredCompletedNs != nil || e.TimeDiscoveredStartedNs == nil {
		t.Errorf("timed-out entry: %+v", e)
	}
	var buf bytes.Buffer
	if err := rec.Dump(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte(`"state":"started"`)) {
		t.Errorf("Dump: %v\n%s", err, buf.String())
	}
}

// Bad calls (pgtest.RunMisuse) fail through the Recorder as through the
// group it wraps, without a panic or a hang; the suite is given the
// Recorder's pg.Extended view, so every ability's calls go through it.
func TestMisuseThroughTheRecorder(t *testing.T) {
	pgtest.RunMisuse(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		groups, err := local.New(n, local.Options{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]pg.ProcessGroup, n)
		for r, g := range groups {
			rec, err := flight.Wrap(g, flight.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var x pg.Extended
			if !pg.As(rec, &x) {
				t.Fatal("no pg.Extended view of a local group")
			}
			out[r] = x
		}
		return out
	})
}

// Of two collectives waiting for a peer, the first is the one the
// backend is in (started) and the second waits behind it (scheduled).
func TestStates(t *testing.T) {
	rs := recorded(t, 2, flight.Options{})
	ctx := context.Background()
	x := pg.Float32s([]float32{1})
	rs[0].AllReduce(ctx, x, pg.Op(pg.Sum))
	rs[0].AllReduce(ctx, x, pg.Op(pg.Sum))
	d := rs[0].Snapshot()
	if d.Entries[0].State != "started" || d.Entries[1].State != "scheduled" {
		t.Errorf("states %s, %s; want started, scheduled", d.Entries[0].State, d.Entries[1].State)
	}
	if s := d.PgStatus["0"]; s["last_enqueued_collective"] != "2" || s["last_started_collective"] != "1" ||
		s["last_completed_collective"] != "0" {
		t.Errorf("pg_status %v", s)
	}
}
