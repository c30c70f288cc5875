package ddp

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// BenchmarkFindNonFiniteOrigin is the cost of Options.FindNonFiniteOrigin
// (Note [where the NaN began] in package reducer) on the benchmark MLP
// (1 rank, 3.7 MB of float32 gradients, a hook that communicates
// nothing): a DDP step without it against one with it, timed in
// alternation as BenchmarkNonFiniteGuard does. origin_% is the median
// ratio minus one; origin_ns the median difference per step, and
// bucket_ns that over the buckets (the scan of each before its hook; the
// agreement's one-word allreduce is nearly free on one rank: see
// BenchmarkFindNonFiniteOriginTCP).
func BenchmarkFindNonFiniteOrigin(b *testing.B) {
	ctx := context.Background()
	models := make([]*mlp[float32], 2)
	for k, on := range []bool{false, true} {
		m := benchMLP(b, 1)
		if err := m.wrap(ctx, world(b, 1)[0], Options{Hook: newDoneHook(), FindNonFiniteOrigin: on}); err != nil {
			b.Fatal(err)
		}
		m.mustBuild(b)
		feedBench(b, m)
		models[k] = m
	}
	step := func(m *mlp[float32]) time.Duration {
		t0 := time.Now()
		if err := m.ddp.RunAll(ctx, m.vm); err != nil {
			b.Fatal(err)
		}
		m.vm.Reset()
		return time.Since(t0)
	}
	for range 3 { // past the rebuild
		step(models[0])
		step(models[1])
	}
	var ratios, diffs []float64
	var total time.Duration
	for b.Loop() {
		var plain, checked time.Duration
		if len(ratios)%2 == 0 {
			plain, checked = step(models[0]), step(models[1])
		} else {
			checked, plain = step(models[1]), step(models[0])
		}
		total += plain
		ratios = append(ratios, checked.Seconds()/plain.Seconds())
		diffs = append(diffs, float64((checked - plain).Nanoseconds()))
	}
	buckets := len(models[1].ddp.Reducer().Buckets())
	reportOrigin(b, ratios, diffs, buckets)
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "step_ns")
}

// BenchmarkFindNonFiniteOriginTCP is the same comparison on two tcp
// ranks in this process with the allreduce hook and no model: one
// reducer iteration of the MLP's gradients on each rank, the wire
// included, without and with the check and its agreement (one allreduce
// of one word per iteration). With no compute in the step it is the worst
// case of the ratio.
func BenchmarkFindNonFiniteOriginTCP(b *testing.B) {
	ctx := context.Background()
	gs := groupsOf(b, "tcp", 2)
	params := benchParams(benchSizes()...)
	rs := make([][2]*reducer.Reducer, len(gs)) // per rank: off, on
	for k, on := range []bool{false, true} {
		errs := onGroups(gs, func(rank int, g pg.ProcessGroup) error {
			r, err := reducer.New(ctx, g, params, Options{Hook: commhook.Allreduce{}, FindNonFiniteOrigin: on})
			rs[rank][k] = r
			return err
		})
		noErrors(b, errs)
	}
	grads := [][]pg.Tensor{randomGrads(params), randomGrads(params)}
	iter := func(k int) time.Duration {
		t0 := time.Now()
		noErrors(b, onGroups(gs, func(rank int, _ pg.ProcessGroup) error { return iterate(ctx, rs[rank][k], grads[rank]) }))
		return time.Since(t0)
	}
	for range 3 { // past the rebuild
		iter(0)
		iter(1)
	}
	var ratios, diffs []float64
	for b.Loop() {
		var plain, checked time.Duration
		if len(ratios)%2 == 0 {
			plain, checked = iter(0), iter(1)
		} else {
			checked, plain = iter(1), iter(0)
		}
		ratios = append(ratios, checked.Seconds()/plain.Seconds())
		diffs = append(diffs, float64((checked - plain).Nanoseconds()))
	}
	reportOrigin(b, ratios, diffs, len(rs[0][1].Buckets()))
}

func reportOrigin(b *testing.B, ratios, diffs []float64, buckets int) {
	slices.Sort(ratios)
	slices.Sort(diffs)
	b.ReportMetric(100*(ratios[len(ratios)/2]-1), "origin_%")
	b.ReportMetric(diffs[len(diffs)/2], "origin_ns")
	b.ReportMetric(diffs[len(diffs)/2]/float64(buckets), "bucket_ns")
	b.ReportMetric(float64(buckets), "buckets")
}
