package instrument_test

import (
	"context"
	"flag"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/pgtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// conformance runs pgtest's whole suite through the wrapper: about 10 s,
// or 50 s under -race, the cost of a backend's own conformance test. The
// wrapper adds no algorithm, so it is off by default:
//
//	go test ./pg/instrument -conformance
var conformance = flag.Bool("conformance", false, "run the pgtest conformance suite through the wrapper")

// wrapped is a local world whose ranks are wrapped, on one registry.
func wrapped(t testing.TB, n int, timeout time.Duration, reg prometheus.Registerer) []pg.ProcessGroup {
	groups, err := local.New(n, local.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]pg.ProcessGroup, n)
	for r, g := range groups {
		if out[r], err = instrument.Wrap(g, reg); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The wrapper is a process group like any other: the conformance suite,
// faults included, passes through it.
func TestConformanceThroughTheWrapper(t *testing.T) {
	if !*conformance {
		t.Skip("run with -conformance (the suite runs in every backend's own tests)")
	}
	reg := prometheus.NewRegistry()
	pgtest.Run(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup { return wrapped(t, n, timeout, reg) })
}

// TestMetricsOfAScriptedRun: two ranks, three allreduces of 16 float32,
// one broadcast of 4 float64 and a barrier. Counts and bytes are exact.
func TestMetricsOfAScriptedRun(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	gs := wrapped(t, 2, 10*time.Second, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(gs))
	for r, g := range gs {
		wg.Go(func() {
			var ws []pg.Work
			for range 3 {
				ws = append(ws, g.AllReduce(ctx, pg.NewTensor(pg.Float32, 16), pg.Op(pg.Sum)))
			}
			ws = append(ws, g.Broadcast(ctx, pg.NewTensor(pg.Float64, 4), 0), g.Barrier(ctx))
			errs[r] = pg.WaitAll(ctx, ws...)
		})
	}
	wg.Wait()
	for r, g := range gs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if b := pg.BackendName(g); b != "local" {
			t.Errorf("rank %d: backend %q through the wrapper", r, b)
		}
		if _, ok := g.(pg.MonitoredBarrierer); !ok {
			t.Errorf("rank %d: the wrapper hides the local group's MonitoredBarrier", r)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var want strings.Builder
	want.WriteString(`# HELP ddp_collective_bytes_total Bytes of the input tensors of collectives, by operation.
# TYPE ddp_collective_bytes_total counter
`)
	for _, rank := range []string{"0", "1"} {
		for _, op := range []struct{ name, bytes string }{{"allgather", "0"}, {"allreduce", "192"}, {"barrier", "0"}, {"broadcast", "32"}, {"reducescatter", "0"}} {
			want.WriteString(`ddp_collective_bytes_total{backend="local",op="` + op.name + `",rank="` + rank + `"} ` + op.bytes + "\n")
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "ddp_collective_bytes_total"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "ddp_collective_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			counts[key] = m.GetHistogram().GetSampleCount()
		}
	}
	for _, rank := range []string{"0", "1"} {
		for op, n := range map[string]uint64{"allreduce": 3, "broadcast": 1, "barrier": 1, "allgather": 0} {
			key := "backend=local op=" + op + " rank=" + rank + " "
			if counts[key] != n {
				t.Errorf("ddp_collective_seconds{%s}: %d observations, want %d (all: %v)", key, counts[key], n, counts)
			}
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestNilRegistererIsTheGroupItself(t *testing.T) {
	groups, err := local.New(1, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer groups[0].Close()
	g, err := instrument.Wrap(groups[0], nil)
	if err != nil || g != pg.ProcessGroup(groups[0]) {
		t.Fatalf("Wrap(g, nil) = %v, %v; want g itself", g, err)
	}
}
