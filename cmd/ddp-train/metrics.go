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
	samples                    prometheus.Counter // this rank's; sum(rate(...)) over ranks is the job's samples/s
}

func newTrainingMetrics() trainingMetrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ddp", Subsystem: "train", Name: name, Help: help})
	}
	return trainingMetrics{
		step:     g("step", "Optimizer steps completed."),
		loss:     g("loss", "Mean training loss over ranks since the previous figures."),
		accuracy: g("accuracy_ratio", "Training accuracy over ranks since the previous figures."),
		samples: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ddp", Subsystem: "train", Name: "samples_total",
			Help: "Training samples this rank has processed (forward and backward) in this process."}),
		comm: g("comm_fraction_ratio", "Fraction of step time spent waiting for communication after backward."),
	}
}

func (m trainingMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.step, m.loss, m.accuracy, m.samples, m.comm}
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

// addSamples counts one step's samples of this rank.
func (m *trainingMetrics) addSamples(n int) {
	if m == nil {
		return
	}
	m.samples.Add(float64(n))
}
