package main

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The training figures ddp-train exports beside the Go runtime's. The
// reducer (ddp_bucket_*, ddp_forward_seconds, ...) and the process group
// wrapper (ddp_collective_*) register their own on the same registry;
// see docs/observability.md.
type trainingMetrics struct {
	step, loss, accuracy, comm prometheus.Gauge
	lr                         prometheus.Gauge       // the learning rate of the last step (--lr-schedule)
	optState                   prometheus.Gauge       // this rank's optimizer-state bytes (its share with --zero)
	evalLoss, evalAccuracy     prometheus.Gauge       // ddp_eval_*: the last held-out evaluation (eval.go)
	evalStep                   prometheus.Gauge       // the optimizer steps done when it ran
	samples                    prometheus.Counter     // this rank's; sum(rate(...)) over ranks is the job's samples/s
	skipped                    prometheus.Counter     // updates skipped by --on-nonfinite skip
	last                       *prometheus.CounterVec // ddp_straggler_last_total{rank}: Note [stragglers, measured]
	skew                       prometheus.Histogram   // ddp_straggler_arrival_skew_seconds
	dilocoMetrics                                     // ddp_diloco_* (diloco.go)
}

func newTrainingMetrics() trainingMetrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ddp", Subsystem: "train", Name: name, Help: help})
	}
	return trainingMetrics{
		step:     g("step", "Optimizer steps completed."),
		loss:     g("loss", "Mean training loss over ranks since the previous figures."),
		accuracy: g("accuracy_ratio", "Training accuracy over ranks since the previous figures."),
		lr:       g("learning_rate", "The learning rate of the last optimizer step (--lr-schedule)."),
		optState: g("optimizer_state_bytes", "Bytes of optimizer state this rank holds: its partition's with --zero, "+
			"the whole otherwise."),
		evalLoss: evalGauge("loss", "Mean cross-entropy over the held-out set (--eval-data) at the last evaluation."),
		evalAccuracy: evalGauge("accuracy_ratio",
			"Accuracy over the held-out set (--eval-data) at the last evaluation."),
		evalStep: evalGauge("step", "Optimizer steps completed when the last held-out evaluation ran."),
		samples: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ddp", Subsystem: "train", Name: "samples_total",
			Help: "Training samples this rank has processed (forward and backward) in this process."}),
		comm: g("comm_fraction_ratio", "Fraction of step time spent waiting for communication after backward."),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ddp", Subsystem: "train",
			Name: "skipped_steps_total",
			Help: "Optimizer updates skipped because the averaged gradients were not finite (--on-nonfinite skip)."}),
		last: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ddp", Subsystem: "straggler", Name: "last_total",
			Help: "Steps in which this rank arrived last at the collectives, by more than --straggler-margin of the step time " +
				"(the same on every rank's endpoint)."}, []string{"rank"}),
		skew: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "ddp", Subsystem: "straggler",
			Name:    "arrival_skew_seconds",
			Help:    "Per step, how much longer the first rank to arrive at the collectives waited than the last one.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2, 16)}),
		dilocoMetrics: newDiLoCoMetrics(),
	}
}

// evalGauge is a ddp_eval_* gauge.
func evalGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ddp", Subsystem: "eval", Name: name, Help: help})
}

func (m trainingMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.step, m.lr, m.optState, m.loss, m.accuracy, m.samples, m.comm, m.skipped,
		m.last, m.skew,
		m.evalLoss, m.evalAccuracy, m.evalStep, m.dilocoOuter, m.dilocoBytes, m.dilocoSeconds}
}

// observeEval sets the ddp_eval_* gauges to an evaluation's figures.
func (m *trainingMetrics) observeEval(r evalResult) {
	if m == nil {
		return
	}
	m.evalLoss.Set(r.Loss)
	m.evalAccuracy.Set(r.Accuracy)
	m.evalStep.Set(float64(r.Step))
}

// observeOptState sets ddp_train_optimizer_state_bytes.
func (m *trainingMetrics) observeOptState(n int64) {
	if m != nil {
		m.optState.Set(float64(n))
	}
}

// observeLR sets ddp_train_learning_rate.
func (m *trainingMetrics) observeLR(lr float64) {
	if m != nil {
		m.lr.Set(lr)
	}
}

func (m *trainingMetrics) observe(step int, r figures) {
	if m == nil {
		return
	}
	m.step.Set(float64(step))
	m.loss.Set(r.Loss)
	m.accuracy.Set(r.Accuracy)
	m.comm.Set(r.CommFraction)
}

// addSamples counts one step's samples of this rank, and whether its
// update was skipped.
func (m *trainingMetrics) addSamples(n, skipped int) {
	if m == nil {
		return
	}
	m.samples.Add(float64(n))
	m.skipped.Add(float64(skipped))
}
