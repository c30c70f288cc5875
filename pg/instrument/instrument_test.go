package instrument_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
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
// With hooks false each rank is first hidden behind withoutHooks, so the
// wrapper measures it by watching Works instead of by completion hook.
func wrapped(t testing.TB, n int, timeout time.Duration, reg prometheus.Registerer, hooks bool) []pg.ProcessGroup {
	groups, err := local.New(n, local.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]pg.ProcessGroup, n)
	for r, g := range groups {
		var inner pg.ProcessGroup = g
		if !hooks {
			inner = withoutHooks{g, g, g}
		}
		if out[r], err = instrument.Wrap(inner, reg); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// withoutHooks is a group with MonitoredBarrier but no completion hook
// and none of the other optional interfaces, like a third-party backend.
type withoutHooks struct {
	pg.ProcessGroup
	pg.MonitoredBarrierer
	pg.Backender
}

// The wrapper is a process group like any other: the conformance suite,
// faults included, passes through it, with the completion hook measuring
// every Work (hooks=true) or the watcher timing the ProcessGroup
// collectives (hooks=false). pgtest wants a pg.Extended, which the
// watcher's wrapper is not, so there the other collectives go straight
// to the local group (see reextended).
func TestConformanceThroughTheWrapper(t *testing.T) {
	if !*conformance {
		t.Skip("run with -conformance (the suite runs in every backend's own tests)")
	}
	reg := prometheus.NewRegistry()
	t.Run("hooks=true", func(t *testing.T) {
		pgtest.Run(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
			return wrapped(t, n, timeout, reg, true)
		})
	})
	t.Run("hooks=false", func(t *testing.T) {
		pgtest.Run(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
			groups, err := local.New(n, local.Options{Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			out := make([]pg.ProcessGroup, n)
			for r, g := range groups {
				w, err := instrument.Wrap(withoutHooks{g, g, g}, reg)
				if err != nil {
					t.Fatal(err)
				}
				out[r] = reextended{w, w.(pg.MonitoredBarrierer), w.(pg.Backender), g, g, g, g, g, g}
			}
			return out
		})
	})
}

// Bad calls (pgtest.RunMisuse) fail through the wrapper as through the
// group it wraps, without a panic or a hang, and run by default: with
// hooks the wrapper is the group itself; without, the watcher's wrapper,
// a pg.ProcessGroup only, is held to the suite's ProcessGroup calls.
func TestMisuseThroughTheWrapper(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, hooks := range []bool{true, false} {
		t.Run(fmt.Sprintf("hooks=%v", hooks), func(t *testing.T) {
			pgtest.RunMisuse(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
				return wrapped(t, n, timeout, reg, hooks)
			})
		})
	}
}

// The byte Counter of comm hooks (instrument.Count) is a wrapper too:
// bad calls through it fail like the group's own, without a panic.
func TestMisuseThroughTheCounter(t *testing.T) {
	pgtest.RunMisuse(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		groups, err := local.New(n, local.Options{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]pg.ProcessGroup, n)
		for r, g := range groups {
			out[r] = instrument.Count(g)
		}
		return out
	})
}

// reextended is a watcher-wrapped group given back the optional
// interfaces the wrapper hides: the ProcessGroup collectives,
// MonitoredBarrier, Abort and Close go through the wrapper, the others
// straight to the local group under it.
type reextended struct {
	pg.ProcessGroup
	pg.MonitoredBarrierer
	pg.Backender
	pg.Rooted
	pg.AllToAller
	pg.PointToPoint
	pg.Coalescer
	pg.Splitter
	pg.CompletionHooker
}

// TestMetricsOfAScriptedRun: two ranks, three allreduces of 16 float32,
// one broadcast of 4 float64 and a barrier. Counts and bytes are exact,
// and the same whether measured by completion hook or by the wrapper.
func TestMetricsOfAScriptedRun(t *testing.T) {
	for _, hooks := range []bool{true, false} {
		t.Run(fmt.Sprintf("hooks=%v", hooks), func(t *testing.T) { testScriptedRun(t, hooks) })
	}
}

func testScriptedRun(t *testing.T, hooks bool) {
	reg := prometheus.NewPedanticRegistry()
	gs := wrapped(t, 2, 10*time.Second, reg, hooks)
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
	counts := seriesCounts(t, reg, "ddp_collective_seconds")
	for _, rank := range []string{"0", "1"} {
		for op, n := range map[string]uint64{"allreduce": 3, "broadcast": 1, "barrier": 1, "allgather": 0} {
			key := "backend=local op=" + op + " rank=" + rank + " "
			if counts[key] != n {
				t.Errorf("ddp_collective_seconds{%s}: %d observations, want %d (all: %v)", key, counts[key], n, counts)
			}
		}
	}
	queued := seriesCounts(t, reg, "ddp_collective_queue_seconds")
	if hooks && queued["backend=local op=allreduce rank=1 "] != 3 {
		t.Errorf("ddp_collective_queue_seconds: %v, want 3 allreduces a rank", queued)
	}
	if !hooks && len(queued) != 0 {
		t.Errorf("ddp_collective_queue_seconds without hooks: %v, want none", queued)
	}
	var want strings.Builder
	want.WriteString(`# HELP ddp_collective_bytes_total Bytes of the input tensors of collectives, by operation.
# TYPE ddp_collective_bytes_total counter
`)
	for _, rank := range []string{"0", "1"} {
		for _, op := range []struct{ name, bytes string }{{"allgather", "0"}, {"allreduce", "192"}, {"barrier", "0"},
			{"broadcast", "32"}, {"reducescatter", "0"}} {
			want.WriteString(`ddp_collective_bytes_total{backend="local",op="` + op.name + `",rank="` + rank + `"} ` +
				`` + op.bytes + "\n")
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "ddp_collective_bytes_total"); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// seriesCounts returns the sample counts of histogram name's series, by
// their labels ("backend=local op=allreduce rank=0 ").
func seriesCounts(t *testing.T, reg prometheus.Gatherer, name string) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
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
	return counts
}

// seriesValues returns the values of counter name's series, by labels.
func seriesValues(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			values[key] = m.GetCounter().GetValue()
		}
	}
	return values
}

// TestExtendedOpsThroughTheHook: a hooked group stays a pg.Extended
// through Wrap, and its other collectives are measured under their
// pg.OpType names, with exact bytes.
func TestExtendedOpsThroughTheHook(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	gs := wrapped(t, 2, 10*time.Second, reg, true)
	xs := make([]pg.Extended, len(gs))
	for r, g := range gs {
		x, ok := g.(pg.Extended)
		if !ok {
			t.Fatalf("rank %d: %T through Wrap is not a pg.Extended", r, g)
		}
		xs[r] = x
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(xs))
	for r, x := range xs {
		wg.Go(func() {
			f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
			scatterIn := f32(0)
			if r == 0 {
				scatterIn = f32(4)
			}
			ws := []pg.Work{
				x.AllToAll(ctx, f32(8), f32(8), nil, nil),                             // 32 bytes
				x.Reduce(ctx, f32(4), 0, pg.Op(pg.Sum)),                               // 16
				x.Gather(ctx, f32(4*(1-r)), f32(2), 0),                                // 8
				x.Scatter(ctx, f32(2), scatterIn, 0),                                  // 16 on the root, 0 elsewhere
				x.AllReduceCoalesced(ctx, []pg.Tensor{f32(4), f32(2)}, pg.Op(pg.Sum)), // 24
			}
			if r == 0 {
				ws = append(ws, x.Send(ctx, f32(3), 1, 7)) // 12
			} else {
				ws = append(ws, x.Recv(ctx, f32(3), 0, 7)) // 12, received
			}
			errs[r] = pg.WaitAll(ctx, ws...)
		})
	}
	wg.Wait()
	for r, g := range gs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if err := g.Close(); err != nil { // delivers what the hooks have not seen yet
			t.Fatal(err)
		}
	}
	want := map[string]float64{}
	for rank, ops := range []map[pg.OpType]float64{
		{pg.OpAllToAll: 32, pg.OpReduce: 16, pg.OpGather: 8, pg.OpScatter: 16, pg.OpAllReduceCoalesced: 24, pg.OpSend: 12},
		{pg.OpAllToAll: 32, pg.OpReduce: 16, pg.OpGather: 8, pg.OpScatter: 0, pg.OpAllReduceCoalesced: 24, pg.OpRecv: 12},
	} {
		for _, op := range []string{"allreduce", "broadcast", "allgather", "reducescatter", "barrier"} {
			want[fmt.Sprintf("backend=local op=%s rank=%d ", op, rank)] = 0
		}
		for op, b := range ops {
			want[fmt.Sprintf("backend=local op=%v rank=%d ", op, rank)] = b
		}
	}
	if got := seriesValues(t, reg, "ddp_collective_bytes_total"); !maps.Equal(got, want) {
		t.Errorf("ddp_collective_bytes_total:\n got %v\nwant %v", got, want)
	}
	for _, name := range []string{"ddp_collective_seconds", "ddp_collective_queue_seconds"} {
		counts := seriesCounts(t, reg, name)
		for key, b := range want {
			if n := counts[key]; (b > 0 || key == "backend=local op=scatter rank=1 ") != (n == 1) {
				t.Errorf("%s{%s}: %d observations (all: %v)", name, key, n, counts)
			}
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestGroupsWithoutHooksAreWrapped: a group that does not report
// completions gets a wrapper, which keeps MonitoredBarrier and the
// backend's name but nothing it cannot measure.
func TestGroupsWithoutHooksAreWrapped(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := wrapped(t, 1, time.Second, reg, false)[0]
	defer g.Close()
	if _, ok := g.(withoutHooks); ok {
		t.Fatal("Wrap returned the group itself, want a wrapper")
	}
	if _, ok := g.(pg.MonitoredBarrierer); !ok {
		t.Error("the wrapper hides MonitoredBarrier")
	}
	if _, ok := g.(pg.CompletionHooker); ok {
		t.Error("the wrapper claims completion hooks its group lacks")
	}
	if b := pg.BackendName(g); b != "local" {
		t.Errorf("backend %q", b)
	}
}

func TestOpLabelsAreOpTypeNames(t *testing.T) {
	for label, op := range map[string]pg.OpType{
		instrument.OpAllReduce: pg.OpAllReduce, instrument.OpBroadcast: pg.OpBroadcast,
		instrument.OpAllGather:     pg.OpAllGather,
		instrument.OpReduceScatter: pg.OpReduceScatter, instrument.OpBarrier: pg.OpBarrier,
	} {
		if op.String() != label {
			t.Errorf("label %q for %v", label, op)
		}
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
