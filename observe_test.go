package ddp

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/timeline"
	"github.com/prometheus/client_golang/prometheus"
)

// TestDDPObservesForwardAndWritesATimeline trains the small MLP through
// the DDP wrapper on two ranks with a registry and a timeline, then
// checks the forward histogram and the trace: valid JSON, every
// iteration's forward before its backward, and, after the rebuild, the
// first bucket launched and its communication started before backward
// ended.
func TestDDPObservesForwardAndWritesATimeline(t *testing.T) {
	const n, iterations = 2, 3
	ctx := testCtx(t)
	reg := prometheus.NewPedanticRegistry()
	bufs := make([]*bytes.Buffer, n)
	tls := make([]*timeline.Writer, n)
	replicas := make([]*mlp[float64], n)
	for r := range n {
		bufs[r] = new(bytes.Buffer)
		tls[r] = timeline.New(bufs[r], r)
		replicas[r] = newMLP[float64](t, mlpSpec{sizes: mlpSizes(), rows: parityRows}, referenceSeed)
	}
	opts := func(r int) Options {
		return Options{BucketCapBytes: 512, FirstBucketBytes: 128, Registerer: reg, Timeline: tls[r]}
	}
	noErrors(t,
		onGroups(groupsOf(t, "local", n), func(r int, g pg.ProcessGroup) error { return replicas[r].wrap(ctx, g, opts(r)) }))
	for _, m := range replicas {
		m.mustBuild(t)
	}
	noErrors(t, parallel(n, func(r int) error {
		m, solver := replicas[r], newSolver("sgd")
		for it := range iterations {
			if err := m.feed(makeBatch[float64](m.spec, parityRows, uint64(10*it+r))); err != nil {
				return err
			}
			if err := m.ddp.RunAll(ctx, m.vm); err != nil {
				return err
			}
			if err := m.step(solver); err != nil {
				return err
			}
		}
		return tls[r].Close()
	}))
	for r := range n {
		if got := histogramCount(t, reg, "ddp_forward_seconds", r); got != iterations {
			t.Errorf("rank %d: %d forward observations, want %d", r, got, iterations)
		}
		checkTrace(t, r, bufs[r].Bytes(), iterations)
	}
	lint(t, reg)
}

type traceEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Args map[string]any `json:"args"`
}

func (e traceEvent) end() float64 { return e.Ts + e.Dur }

// arg is an integer argument, or -1.
func (e traceEvent) arg(key string) int64 {
	if v, ok := e.Args[key].(float64); ok {
		return int64(v)
	}
	return -1
}

func checkTrace(t *testing.T, rank int, data []byte, iterations int) {
	t.Helper()
	// Timestamps are Unix microseconds, exact in the file; as float64 they
	// are good to a quarter of a microsecond.
	const eps = 1.0
	var events []traceEvent
	if err := json.Unmarshal(data, &events); err != nil {
		t.Fatalf("rank %d: the trace is not a JSON array of events: %v\n%s", rank, err, data)
	}
	var steps []traceEvent
	for _, e := range events {
		if e.Ph == "X" && e.Name == "step" {
			steps = append(steps, e)
		}
	}
	if len(steps) != iterations {
		t.Fatalf("rank %d: %d steps in the trace, want %d", rank, len(steps), iterations)
	}
	for it, step := range steps {
		in := func(name string) []traceEvent { // the iteration's events called name, by start
			var out []traceEvent
			for _, e := range events {
				if e.Ph == "X" && e.Name == name && e.Pid == rank && e.Ts+eps >= step.Ts && e.end() <= step.end()+eps {
					out = append(out, e)
				}
			}
			slices.SortFunc(out, func(a, b traceEvent) int { return cmp.Compare(a.Ts, b.Ts) })
			return out
		}
		fwd, bwd := in("forward"), in("backward")
		launches, comms, waits, copies := in("launch"), in("communication"), in("wait"), in("copy")
		if len(fwd) != 1 || len(bwd) != 1 || len(launches) == 0 || len(comms) != len(launches) ||
			len(waits) != len(launches) || len(copies) != 6 {
			t.Fatalf("rank %d iteration %d: %d forward, %d backward, %d launches, %d communications, %d waits, %d copies",
				rank, it, len(fwd), len(bwd), len(launches), len(comms), len(waits), len(copies))
		}
		if fwd[0].end() > bwd[0].Ts+eps {
			t.Errorf("rank %d iteration %d: forward ends at %v, after backward starts at %v", rank, it, fwd[0].end(), bwd[0].Ts)
		}
		for k, l := range launches {
			if l.arg("bucket") != int64(k) || comms[k].arg("bucket") != int64(k) || comms[k].Ts+eps < l.Ts ||
				waits[k].Ts+eps < bwd[0].end() {
				t.Errorf("rank %d iteration %d bucket %d: launch %+v, communication %+v, wait %+v", rank, it, k, l, comms[k],
					waits[k])
			}
		}
		for _, c := range copies {
			if c.Ts+eps < bwd[0].Ts || c.end() > bwd[0].end()+eps {
				t.Errorf("rank %d iteration %d: copy %+v outside backward %+v", rank, it, c, bwd[0])
			}
		}
		if it == 0 {
			continue // one bucket, holding fc1's gradients too: it launches at the end of backward
		}
		if len(launches) < 3 {
			t.Errorf("rank %d iteration %d: %d buckets after the rebuild, want 3", rank, it, len(launches))
		}
		if launches[0].Ts >= bwd[0].end() || comms[0].Ts >= bwd[0].end() {
			t.Errorf("rank %d iteration %d: bucket 0 launched at %v, its communication began at %v, backward ended at %v: no "+
				"overlap",
				rank, it, launches[0].Ts, comms[0].Ts, bwd[0].end())
		}
	}
}

func lint(t *testing.T, g prometheus.Gatherer) { t.Helper(); testworld.Lint(t, g) }

func histogramCount(t *testing.T, g prometheus.Gatherer, name string, rank int) uint64 {
	t.Helper()
	return testworld.HistogramCount(t, g, name, rank)
}
