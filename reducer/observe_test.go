package reducer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/timeline"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"
)

// observedParams are four float32 parameters: fc1.weight 8x16 (512
// bytes), fc1.bias (64), fc2.weight 16x4 (256), fc2.bias (16). With a
// first bucket of 64 bytes and a cap of 256, the rebuild in ready order
// (3 2 1 0) gives two buckets: {fc2.bias, fc2.weight} of 272 bytes, then
// {fc1.bias, fc1.weight} of 576. Before the rebuild there is one bucket
// of 848 bytes.
func observedParams() []Param { return benchParams(8, 16, 4) }

func observedOpts(reg prometheus.Registerer) Options {
	return Options{Registerer: reg, BucketCapBytes: 256, FirstBucketBytes: 64}
}

// scripted runs, on every rank, one no-sync iteration then sync
// iterations, marking gradients last first. before, if set, runs before
// each MarkReady.
func scripted(t *testing.T, rs []*Reducer, sync int, before func(rank, it, param int)) {
	t.Helper()
	ctx := testCtx(t)
	params := observedParams()
	noErrors(t, parallel(len(rs), func(rank int) error {
		r := rs[rank]
		grads := randomGrads(params)
		for it := range sync + 1 {
			if err := r.Prepare(ctx, Iteration{Sync: it > 0}); err != nil {
				return err
			}
			for i := len(grads) - 1; i >= 0; i-- {
				if before != nil {
					before(rank, it, i)
				}
				if err := r.MarkReady(i, grads[i]); err != nil {
					return err
				}
			}
			if err := r.Finalize(ctx); err != nil {
				return err
			}
		}
		return nil
	}))
}

func newObserved(t *testing.T, n int, opts func(rank int) Options) []*Reducer {
	t.Helper()
	ctx := testCtx(t)
	rs := make([]*Reducer, n)
	noErrors(t, onRanks(world(t, n), func(rank int, g pg.ProcessGroup) error {
		var err error
		rs[rank], err = New(ctx, g, observedParams(), opts(rank))
		return err
	}))
	return rs
}

// TestMetricsOfAScriptedRun: two ranks over pg/local on one registry,
// one no-sync iteration and five synchronised ones. Counters and gauges
// are exact; histograms are checked by their counts.
func TestMetricsOfAScriptedRun(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	rs := newObserved(t, 2, func(int) Options { return observedOpts(reg) })
	scripted(t, rs, 5, nil)

	if got := rs[0].layout.bucketBytes(); !slices.Equal(got, []int{272, 576}) {
		t.Fatalf("bucket bytes after the rebuild %v; the expectations below assume [272 576]", got)
	}
	var want strings.Builder
	want.WriteString(`
# HELP ddp_bucket_bytes Size of each bucket of the current plan, in launch order.
# TYPE ddp_bucket_bytes gauge
# HELP ddp_bucket_rebuilds_total Bucket rebuilds in gradient-ready order.
# TYPE ddp_bucket_rebuilds_total counter
# HELP ddp_buckets Number of buckets in the current plan.
# TYPE ddp_buckets gauge
# HELP ddp_comm_bytes_total Bytes of the tensors the comm hook handed to collectives.
# TYPE ddp_comm_bytes_total counter
# HELP ddp_compression_ratio Bucket bytes over the bytes the comm hook handed to collectives, in the last ` +
		`synchronised iteration (1 without compression).
# TYPE ddp_compression_ratio gauge
# HELP ddp_iterations_total Iterations completed (Finalize returned), synchronised or not.
# TYPE ddp_iterations_total counter
`)
	for rank := range 2 { // labels sorted by name, as the registry gathers them
		fmt.Fprintf(&want, "ddp_bucket_bytes{backend=\"local\",bucket=\"0\",rank=\"%d\"} 272\n", rank)
		fmt.Fprintf(&want, "ddp_bucket_bytes{backend=\"local\",bucket=\"1\",rank=\"%d\"} 576\n", rank)
		fmt.Fprintf(&want, "ddp_bucket_rebuilds_total{backend=\"local\",rank=\"%d\"} 1\n", rank)
		fmt.Fprintf(&want, "ddp_buckets{backend=\"local\",rank=\"%d\"} 2\n", rank)
		fmt.Fprintf(&want, "ddp_comm_bytes_total{backend=\"local\",hook=\"allreduce\",rank=\"%d\"} %d\n", rank, 5*848)
		fmt.Fprintf(&want, "ddp_compression_ratio{backend=\"local\",hook=\"allreduce\",rank=\"%d\"} 1\n", rank)
		fmt.Fprintf(&want, "ddp_iterations_total{backend=\"local\",rank=\"%d\"} 6\n", rank)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()),
		"ddp_bucket_bytes", "ddp_bucket_rebuilds_total", "ddp_buckets", "ddp_comm_bytes_total", "ddp_compression_ratio",
		"ddp_iterations_total"); err != nil {
		t.Error(err)
	}
	counts := map[string]uint64{
		"ddp_forward_seconds":                      0, // a bare reducer does not see forward
		"ddp_backward_compute_seconds":             6,
		"ddp_backward_comm_seconds":                5,
		"ddp_comm_exposed_seconds":                 5,
		"ddp_last_bucket_wait_seconds":             5,
		`ddp_bucket_allreduce_seconds{bucket="0"}`: 5, // the single bucket of iteration 1 is bucket 0
		`ddp_bucket_allreduce_seconds{bucket="1"}`: 4,
	}
	for rank := range 2 {
		for name, n := range counts {
			if got := histogramCount(t, reg, name, rank); got != n {
				t.Errorf("rank %d: %s has %d observations, want %d", rank, name, got, n)
			}
		}
	}
	if n, err := testutil.GatherAndCount(reg, "ddp_errors_total"); err != nil || n != 0 {
		t.Errorf("ddp_errors_total has %d series (%v); a clean run has none", n, err)
	}
	lint(t, reg)
}

func lint(t *testing.T, g prometheus.Gatherer) { t.Helper(); testworld.Lint(t, g) }

func histogramCount(t *testing.T, g prometheus.Gatherer, name string, rank int) uint64 {
	t.Helper()
	return testworld.HistogramCount(t, g, name, rank)
}

func find(t *testing.T, g prometheus.Gatherer, name string, rank int) *dto.Metric {
	t.Helper()
	return testworld.Series(t, g, name, rank)
}

// halfHook communicates the first half of each bucket only: a
// compression ratio of 2.
type halfHook struct{}

func (halfHook) Name() string { return "half" }

func (halfHook) Run(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
	return g.AllReduce(ctx, b.Buffer.Slice(0, b.Buffer.Len()/2), pg.Op(pg.Sum))
}

func TestCompressionRatioAndCommBytes(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	rs := newObserved(t, 2, func(int) Options {
		o := observedOpts(reg)
		o.Hook = halfHook{}
		return o
	})
	scripted(t, rs, 3, nil)
	want := fmt.Sprintf(`
# HELP ddp_comm_bytes_total Bytes of the tensors the comm hook handed to collectives.
# TYPE ddp_comm_bytes_total counter
ddp_comm_bytes_total{backend="local",hook="half",rank="0"} %d
ddp_comm_bytes_total{backend="local",hook="half",rank="1"} %d
# HELP ddp_compression_ratio Bucket bytes over the bytes the comm hook handed to collectives, in the last `+
		`synchronised iteration (1 without compression).
# TYPE ddp_compression_ratio gauge
ddp_compression_ratio{backend="local",hook="half",rank="0"} 2
ddp_compression_ratio{backend="local",hook="half",rank="1"} 2
`, 3*424, 3*424)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ddp_comm_bytes_total",
		"ddp_compression_ratio"); err != nil {
		t.Error(err)
	}
}

// A parameter marked twice is a fatal error, counted by type.
func TestErrorsAreCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r := newObserved(t, 1, func(int) Options { return observedOpts(reg) })[0]
	ctx := testCtx(t)
	grads := randomGrads(observedParams())
	if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkReady(3, grads[3]); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkReady(3, grads[3]); err == nil {
		t.Fatal("marking a parameter twice succeeded")
	}
	want := `
# HELP ddp_errors_total Fatal reducer errors, by type.
# TYPE ddp_errors_total counter
ddp_errors_total{backend="local",rank="0",type="marked_twice"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ddp_errors_total"); err != nil {
		t.Error(err)
	}
}

// TestStragglerShowsInLastBucketWait: rank 1 is slow to produce its
// last gradient, so rank 0 waits for the last bucket in every
// synchronised iteration; rank 1, the straggler, hardly waits. The wait
// shows in the histogram and in the logging data.
func TestStragglerShowsInLastBucketWait(t *testing.T) {
	const delay, iterations = 30 * time.Millisecond, 3
	reg := prometheus.NewPedanticRegistry()
	rs := newObserved(t, 2, func(int) Options { return observedOpts(reg) })
	scripted(t, rs, iterations, func(rank, it, param int) {
		if rank == 1 && it > 0 && param == 0 {
			time.Sleep(delay)
		}
	})
	sum := func(rank int) time.Duration {
		return time.Duration(find(t, reg, "ddp_last_bucket_wait_seconds", rank).GetHistogram().GetSampleSum() * 1e9)
	}
	if s := sum(0); s < iterations*delay/2 {
		t.Errorf("rank 0 waited %v in all for the last bucket; rank 1 delayed it by %v in each of %d iterations", s, delay,
			iterations)
	}
	if s0, s1 := sum(0), sum(1); s1 >= s0 {
		t.Errorf("the straggler waited %v, longer than the rank waiting for it (%v)", s1, s0)
	}
	if w := rs[0].LoggingData().LastBucketWait; w < delay/2 {
		t.Errorf("rank 0's logging data says it waited %v for the last bucket, want about %v", w, delay)
	}
}

// TestLoggingDataIsSampled: twelve synchronised iterations are sampled
// at 1 to 10, each logged once; the record holds the rebuild and the
// ready order.
func TestLoggingDataIsSampled(t *testing.T) {
	core, logs := zapobserver.New(zap.DebugLevel) // the runtime lines are debug
	r := newObserved(t, 1,
		func(int) Options { return Options{Logger: zap.New(core), BucketCapBytes: 256, FirstBucketBytes: 64} })[0]
	scripted(t, []*Reducer{r}, 12, nil)

	if n := logs.FilterMessage("DDP initialized").Len(); n != 1 {
		t.Errorf("%d construction lines, want 1", n)
	}
	var its []int64
	for _, e := range logs.FilterMessage("DDP runtime stats").All() {
		its = append(its, int64(e.ContextMap()["iteration"].(int)))
	}
	if want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(its, want) {
		t.Errorf("runtime stats logged at iterations %v, want %v", its, want)
	}
	d := r.LoggingData()
	if d.WorldSize != 1 || d.Backend != "local" || d.NumParameters != 4 || d.ParameterBytes != 848 ||
		!slices.Equal(d.Dtypes, []string{"float32"}) ||
		!slices.Equal(d.BucketSizes, []int{848}) || d.CommHook != "allreduce" || d.BucketCapBytes != 256 {
		t.Errorf("construction data %+v", d.Construction)
	}
	if d.Samples != 10 || d.Iteration != 10 || !d.HasRebuiltBuckets ||
		!slices.Equal(d.RebuiltBucketSizes, []int{272, 576}) ||
		!slices.Equal(d.GradReadyOrder, []int{3, 2, 1, 0}) || len(d.RebuiltPerBucketParamIndices) != 2 {
		t.Errorf("runtime data %+v", d.Runtime)
	}
	if d.BackwardComm <= 0 || d.AvgBackwardComm <= 0 || d.BackwardCompute <= 0 || d.ForwardCompute != 0 {
		t.Errorf("durations: comm %v (avg %v), compute %v, forward %v (a bare reducer does not see forward)",
			d.BackwardComm, d.AvgBackwardComm, d.BackwardCompute, d.ForwardCompute)
	}
}

// TestObservedIterationAllocations: with metrics and a logger, a
// steady-state iteration allocates once, for the goroutine that watches
// the buckets' Works (see Note [observation]); MarkReady itself
// allocates nothing, as TestMarkReadyAllocatesNothing holds without
// observation.
func TestObservedIterationAllocations(t *testing.T) {
	ctx := context.Background()
	params := observedParams()
	grads := randomGrads(params)
	opts := observedOptions()
	opts.Hook, opts.BucketCapBytes, opts.FirstBucketBytes = newDoneHook(), 256, 64
	r, err := New(ctx, world(t, 1)[0], params, opts)
	if err != nil {
		t.Fatal(err)
	}
	for range 11 { // past the rebuild and the first ten samples
		if err := iterate(ctx, r, grads); err != nil {
			t.Fatal(err)
		}
	}
	if a := testing.AllocsPerRun(20, func() {
		if err := iterate(ctx, r, grads); err != nil {
			t.Fatal(err)
		}
	}); a > 1 {
		t.Errorf("an observed iteration allocates %v times; want at most 1", a)
	}
}

// TestObservationInEveryMode runs two ranks with every sink on through
// the reducer's modes (static graph, unused parameters, an accumulation
// window, the first static iteration launching at Finalize), and wants
// every iteration counted, a valid trace and clean lint. goleak checks
// that each iteration's watcher ended.
func TestObservationInEveryMode(t *testing.T) {
	modes := map[string]struct {
		opts   Options
		unused []int // parameter 1 (fc1.bias) gets no gradient
		sync   []bool
	}{
		"static graph":    {Options{StaticGraph: true}, []int{1}, []bool{true, true, true, true}},
		"find unused":     {Options{FindUnusedParameters: true}, []int{1}, []bool{true, true, true, true}},
		"no sync":         {Options{}, nil, []bool{false, true, false, true}},
		"static, no sync": {Options{StaticGraph: true}, nil, []bool{false, true, true, true}},
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			reg := prometheus.NewPedanticRegistry()
			bufs := []*bytes.Buffer{{}, {}}
			rs := newObserved(t, 2, func(rank int) Options {
				o := mode.opts
				o.Registerer, o.Timeline, o.BucketCapBytes, o.FirstBucketBytes = reg, timeline.New(bufs[rank], rank), 256, 64
				o.Logger = observedOptions().Logger
				return o
			})
			params := observedParams()
			noErrors(t, parallel(2, func(rank int) error {
				r, grads := rs[rank], randomGrads(params)
				for _, sync := range mode.sync {
					it := Iteration{Sync: sync}
					if !mode.opts.StaticGraph {
						it.Unused = mode.unused
					}
					if err := r.Prepare(ctx, it); err != nil {
						return err
					}
					for i := len(grads) - 1; i >= 0; i-- {
						if !slices.Contains(mode.unused, i) {
							if err := r.MarkReady(i, grads[i]); err != nil {
								return err
							}
						}
					}
					if err := r.Finalize(ctx); err != nil {
						return err
					}
				}
				return r.opts.Timeline.Close()
			}))
			for rank := range 2 {
				if v := testutil.ToFloat64(rs[rank].obs.(*liveObserver).m.iterations); v != float64(len(mode.sync)) {
					t.Errorf("rank %d: ddp_iterations_total %v, want %d", rank, v, len(mode.sync))
				}
				if !json.Valid(bufs[rank].Bytes()) {
					t.Errorf("rank %d: the trace is not valid JSON", rank)
				}
				if len(mode.unused) > 0 {
					if got := rs[rank].LoggingData().UnusedParameterBytes; got != 64 {
						t.Errorf("rank %d: unused parameter bytes %d, want 64 (fc1.bias)", rank, got)
					}
				}
			}
			lint(t, reg)
		})
	}
}

// A bucket whose communication fails counts as an error of its kind, and
// the iteration's watcher still ends.
func TestFailedCommunicationIsCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r := newObserved(t, 1, func(int) Options {
		o := observedOpts(reg)
		o.Hook = commhook.HookFunc(func(context.Context, pg.ProcessGroup, *commhook.GradBucket) pg.Work {
			return pg.Completed(&pg.CollectiveError{Op: "allreduce", Kind: pg.ErrTimeout})
		})
		return o
	})[0]
	ctx := testCtx(t)
	grads := randomGrads(observedParams())
	if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
		t.Fatal(err)
	}
	for i := len(grads) - 1; i >= 0; i-- {
		if err := r.MarkReady(i, grads[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Finalize(ctx); !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("Finalize: %v, want a timeout", err)
	}
	if v := testutil.ToFloat64(r.obs.(*liveObserver).m.errors.WithLabelValues("timeout")); v != 1 {
		t.Errorf("ddp_errors_total{type=timeout} = %v, want 1", v)
	}
}

// A reducer built again on the same registry, for the same rank and
// backend (say after a restart in the same process), carries on with the
// series of the one before.
func TestRebuiltReducerSharesSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for range 2 {
		r := newObserved(t, 1, func(int) Options { return observedOpts(reg) })
		scripted(t, r, 2, nil)
	}
	last := newObserved(t, 1, func(int) Options { return observedOpts(reg) })[0]
	if v := testutil.ToFloat64(last.obs.(*liveObserver).m.iterations); v != 6 {
		t.Errorf("ddp_iterations_total = %v after two reducers of 3 iterations each, want 6", v)
	}
}
