package ddp

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/goddp/ddp/reducer"

	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/pg"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Note [Reading the observation benchmark]
//
// BenchmarkObservationOverhead measures what metrics and the sampled
// logging data cost, against the step of the MLP
// (784-512-512-512-10, float32, batch 64), all in the same run:
//
//   - reducer: every loop runs one plain MLP step (step_ns), then, on
//     that step's gradients and in alternating order, one iteration of a
//     reducer with nothing observed (plain_ns) and one of a reducer with
//     a Prometheus registry and an Info-level zap logger writing to
//     io.Discard (observed_ns). overhead_% = 100·(observed−plain)/
//     (step+plain): the share of a DDP step that observation adds. Both
//     reducers use the finished-Work hook, so no communication hides or
//     adds anything.
//   - ddp: the same MLP trained through two DDP wrappers, one observed
//     and one not, in alternating order; ddp_ratio is the median over
//     loops of observed/plain step time. It includes the backward mark on
//     the loss, but it is the ratio of two noisy figures: read
//     reducer/overhead_% for the cost, this for a sanity check.

// observedOptions are the sinks of the observed side: metrics and the
// sampled logging data (a logger that formats and discards its lines).
func observedOptions() Options {
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard),
		zapcore.InfoLevel)
	return Options{Registerer: prometheus.NewRegistry(), Logger: zap.New(core)}
}

func BenchmarkObservationOverhead(b *testing.B) {
	b.Run("reducer", benchObservedReducer)
	b.Run("ddp", benchObservedDDP)
}

func benchObservedReducer(b *testing.B) {
	m := benchMLP(b, 1).mustBuild(b)
	feedBench(b, m)
	params := benchParams(benchSizes()...)
	grads := make([]pg.Tensor, len(params))
	gradsOf := func() {
		for i, g := range m.grads {
			t, err := gtensor.TensorOf(g.Value())
			if err != nil {
				b.Fatal(err)
			}
			grads[i] = t
		}
	}
	if err := m.vm.RunAll(); err != nil {
		b.Fatal(err)
	}
	gradsOf()
	plain := benchReducer(b, params, Options{}, grads)
	observed := benchReducer(b, params, observedOptions(), grads)
	m.vm.Reset()
	ctx := context.Background()
	timed := func(r *reducer.Reducer) time.Duration {
		t0 := time.Now()
		if err := iterate(ctx, r, grads); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var step, tp, to time.Duration
	odd := false
	for b.Loop() {
		t0 := time.Now()
		if err := m.vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		step += time.Since(t0)
		gradsOf()
		if odd {
			to += timed(observed)
			tp += timed(plain)
		} else {
			tp += timed(plain)
			to += timed(observed)
		}
		odd = !odd
		m.vm.Reset()
	}
	n := float64(b.N)
	b.ReportMetric(float64(step.Nanoseconds())/n, "step_ns")
	b.ReportMetric(float64(tp.Nanoseconds())/n, "plain_ns")
	b.ReportMetric(float64(to.Nanoseconds())/n, "observed_ns")
	b.ReportMetric(100*(to-tp).Seconds()/(step+tp).Seconds(), "overhead_%")
}

func benchObservedDDP(b *testing.B) {
	ctx := context.Background()
	replica := func(opts Options) func() {
		m := benchMLP(b, 1)
		opts.Hook = newDoneHook()
		if err := m.wrap(ctx, world(b, 1)[0], opts); err != nil {
			b.Fatal(err)
		}
		m.mustBuild(b)
		feedBench(b, m)
		step := func() {
			if err := m.ddp.RunAll(ctx, m.vm); err != nil {
				b.Fatal(err)
			}
			m.vm.Reset()
		}
		for range 3 { // past the rebuild
			step()
		}
		return step
	}
	plain, observed := replica(Options{}), replica(observedOptions())
	var ratios []float64
	for b.Loop() {
		first, second := plain, observed
		if len(ratios)%2 == 1 {
			first, second = second, first
		}
		t0 := time.Now()
		first()
		t1 := time.Now()
		second()
		t2 := time.Now()
		p, o := t1.Sub(t0), t2.Sub(t1)
		if len(ratios)%2 == 1 {
			p, o = o, p
		}
		ratios = append(ratios, o.Seconds()/p.Seconds())
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "ddp_ratio")
}
