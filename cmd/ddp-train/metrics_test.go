package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// ddp_train_samples_total counts every step's samples, for Prometheus to
// rate; no precomputed samples-per-second gauge is served.
func TestSamplesCounter(t *testing.T) {
	m := newTrainingMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.collectors()...)
	for range 5 {
		m.addSamples(32, 0)
	}
	m.observe(5, figures{Loss: 1, SamplesPerSec: 1e6})
	if got := testutil.ToFloat64(m.samples); got != 160 {
		t.Errorf("ddp_train_samples_total %v after 5 steps of 32, want 160", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		switch name := f.GetName(); {
		case name == "ddp_train_samples_total":
			found = f.GetType().String() == "COUNTER"
		case strings.Contains(name, "per_second"):
			t.Errorf("%s is served; rates are Prometheus's to compute", name)
		}
	}
	if !found {
		t.Error("no ddp_train_samples_total counter")
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	var off *trainingMetrics
	off.addSamples(1, 0) // metrics off: nothing, no panic
}

// ddp_train_optimizer_state_bytes is the value observeOptState sets.
func TestOptimizerStateGauge(t *testing.T) {
	m := newTrainingMetrics()
	m.observeOptState(4096)
	if got := testutil.ToFloat64(m.optState); got != 4096 {
		t.Errorf("ddp_train_optimizer_state_bytes %v, want 4096", got)
	}
	var off *trainingMetrics
	off.observeOptState(1) // metrics off: nothing, no panic
}
