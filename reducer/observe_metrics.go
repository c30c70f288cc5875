package reducer

import (
	"context"
	"errors"
	"strconv"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the reducer's Prometheus metrics. Every one carries the
// constant labels rank and backend; see docs/observability.md.
type metrics struct {
	bucketSeconds   *prometheus.HistogramVec // {bucket}: launch to completion
	forward         prometheus.Histogram
	backwardCompute prometheus.Histogram
	backwardComm    prometheus.Histogram
	commExposed     prometheus.Histogram
	lastBucketWait  prometheus.Histogram
	bucketBytes     *prometheus.GaugeVec // {bucket}
	buckets         prometheus.Gauge
	compression     *prometheus.GaugeVec // {hook}
	iterations      prometheus.Counter
	commBytes       *prometheus.CounterVec // {hook}
	errors          *prometheus.CounterVec // {type}
	rebuilds        prometheus.Counter
	copyBytes       *prometheus.CounterVec // {direction}: in, out, in_place (view.go)

	// Resolved children, so an iteration only calls Observe, Add and Set.
	perBucket      []prometheus.Observer
	hookBytes      prometheus.Counter
	hookRatio      prometheus.Gauge
	sent           *instrument.Counter // the group hooks see, counting their bytes
	sentAtLastStep int64
	copiedIn       prometheus.Counter
	copiedOut      prometheus.Counter
	inPlace        prometheus.Counter
	copiesSeen     CopyStats // the reducer's counters at the last publish
}

// secondsBuckets span 10µs to about 5s in factors of 2: a bucket's
// allreduce on loopback to a large model's step.
func secondsBuckets() []float64 { return prometheus.ExponentialBuckets(10e-6, 2, 20) }

func newMetrics(reg prometheus.Registerer, g pg.ProcessGroup) (*metrics, error) {
	labels := prometheus.Labels{"rank": strconv.Itoa(g.Rank()), "backend": pg.BackendName(g)}
	hist := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels,
			Buckets: secondsBuckets()})
	}
	m := &metrics{
		bucketSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ddp_bucket_allreduce_seconds",
			ConstLabels: labels, Buckets: secondsBuckets(),
			Help: "Time from a bucket's launch (the comm hook's call) to the completion of its communication."},
			[]string{"bucket"}),
		forward: hist("ddp_forward_seconds",
			"Forward compute time: from Prepare to the start of backward (DDP wrapper only)."),
		backwardCompute: hist("ddp_backward_compute_seconds",
			"Backward compute time: from the start of backward to its end."),
		backwardComm: hist("ddp_backward_comm_seconds",
			"Backward communication time: from the first bucket's launch to the end of Finalize."),
		commExposed: hist("ddp_comm_exposed_seconds",
			"Communication time not hidden behind backward: backward comm minus its overlap with backward compute."),
		lastBucketWait: hist("ddp_last_bucket_wait_seconds",
			"Time Finalize waited for the last bucket: long on ranks that wait for a straggler."),
		bucketBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ddp_bucket_bytes", ConstLabels: labels,
			Help: "Size of each bucket of the current plan, in launch order."}, []string{"bucket"}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ddp_buckets", ConstLabels: labels,
			Help: "Number of buckets in the current plan."}),
		compression: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ddp_compression_ratio", ConstLabels: labels,
			Help: "Bucket bytes over the bytes the comm hook handed to collectives, in the last synchronised iteration (1 " +
				"without compression)."}, []string{"hook"}),
		iterations: prometheus.NewCounter(prometheus.CounterOpts{Name: "ddp_iterations_total", ConstLabels: labels,
			Help: "Iterations completed (Finalize returned), synchronised or not."}),
		commBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ddp_comm_bytes_total", ConstLabels: labels,
			Help: "Bytes of the tensors the comm hook handed to collectives."}, []string{"hook"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ddp_errors_total", ConstLabels: labels,
			Help: "Fatal reducer errors, by type."}, []string{"type"}),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{Name: "ddp_bucket_rebuilds_total", ConstLabels: labels,
			Help: "Bucket rebuilds in gradient-ready order."}),
		copyBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ddp_gradient_copy_bytes_total", ConstLabels: labels,
			Help: "Gradient bytes the reducer copied into buckets (in), back into gradients (out), or found already in their " +
				"bucket view (in_place, GradientAsBucketView)."}, []string{"direction"}),
	}
	errs := []error{
		register(reg, &m.bucketSeconds), register(reg, &m.forward), register(reg, &m.backwardCompute),
		register(reg, &m.backwardComm), register(reg, &m.commExposed), register(reg, &m.lastBucketWait),
		register(reg, &m.bucketBytes), register(reg, &m.buckets), register(reg, &m.compression),
		register(reg, &m.iterations), register(reg, &m.commBytes), register(reg, &m.errors), register(reg, &m.rebuilds),
		register(reg, &m.copyBytes),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m.sent = instrument.Count(g)
	m.copiedIn, m.copiedOut, m.inPlace = m.copyBytes.WithLabelValues("in"), m.copyBytes.WithLabelValues(
		"out"), m.copyBytes.WithLabelValues("in_place")
	return m, nil
}

// copies publishes the reducer's copy counters since the last call.
func (m *metrics) copies(now CopyStats) {
	m.copiedIn.Add(float64(now.In - m.copiesSeen.In))
	m.copiedOut.Add(float64(now.Out - m.copiesSeen.Out))
	m.inPlace.Add(float64(now.InPlace - m.copiesSeen.InPlace))
	m.copiesSeen = now
}

// register registers *c or, when a collector of the same type and
// description is registered already, puts that one in *c: a reducer
// rebuilt on the same registry carries on with its predecessor's series.
func register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}

// setHook resolves the hook-labelled series, once the hook is known.
func (m *metrics) setHook(name string) {
	m.hookBytes = m.commBytes.WithLabelValues(name)
	m.hookRatio = m.compression.WithLabelValues(name)
}

// setLayout publishes a new bucket plan and resolves its per-bucket series.
func (m *metrics) setLayout(bytes []int) {
	m.buckets.Set(float64(len(bytes)))
	m.bucketBytes.Reset()
	m.perBucket = m.perBucket[:0]
	for b, n := range bytes {
		label := strconv.Itoa(b)
		m.bucketBytes.WithLabelValues(label).Set(float64(n))
		m.perBucket = append(m.perBucket, m.bucketSeconds.WithLabelValues(label))
	}
}

// commStep adds the bytes the hook sent since the last call and sets the
// compression ratio against the buckets' bytes.
func (m *metrics) commStep(bucketBytes int64) {
	sent := m.sent.Bytes()
	d := sent - m.sentAtLastStep
	m.sentAtLastStep = sent
	m.hookBytes.Add(float64(d))
	if d > 0 {
		m.hookRatio.Set(float64(bucketBytes) / float64(d))
	}
}

// errorType names an error for ddp_errors_total{type}.
func errorType(err error) string {
	switch {
	case errors.Is(err, ErrUnfinishedReduction):
		return "unfinished_reduction"
	case errors.Is(err, ErrMarkedTwice):
		return "marked_twice"
	case errors.Is(err, ErrBadGradient):
		return "bad_gradient"
	case errors.Is(err, ErrGraphChanged):
		return "graph_changed"
	case errors.Is(err, pg.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, pg.ErrRemote):
		return "remote"
	case errors.Is(err, pg.ErrComm):
		return "comm"
	case errors.Is(err, pg.ErrAborted):
		return "aborted"
	case errors.Is(err, pg.ErrClosed):
		return "closed"
	case errors.Is(err, pg.ErrMismatch):
		return "mismatch"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "other"
}
