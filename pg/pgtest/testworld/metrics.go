package testworld

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// Lint runs promtool's metric lint (testutil.GatherAndLint uses the same
// rules as `promtool check metrics`) and wants no problem.
func Lint(t testing.TB, g prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// HistogramCount is the sample count of the histogram name{extra
// labels} of rank.
func HistogramCount(t testing.TB, g prometheus.Gatherer, name string, rank int) uint64 {
	t.Helper()
	m := Series(t, g, name, rank)
	if m == nil || m.GetHistogram() == nil {
		t.Fatalf("no histogram %s for rank %d", name, rank)
	}
	return m.GetHistogram().GetSampleCount()
}

// Series returns the series name{labels} of rank, where name may carry
// extra labels as in `x{bucket="0"}`.
func Series(t testing.TB, g prometheus.Gatherer, name string, rank int) *dto.Metric {
	t.Helper()
	base, extra, _ := strings.Cut(strings.TrimSuffix(name, "}"), "{")
	want := map[string]string{"rank": fmt.Sprint(rank)}
	if extra != "" {
		for _, kv := range strings.Split(extra, ",") {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = strings.Trim(v, `"`)
		}
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != base {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			return m
		}
	}
	return nil
}
