package ddp

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkReplicaCheck is the cost of the replica check (Note [replica
// check] in package reducer) on the benchmark MLP (3.7 MB of float32
// parameters, 1 rank, a hook that communicates nothing): a DDP step alone
// against the same step followed by VerifyReplicas, the worst case of
// checking every step, timed in alternation as BenchmarkDDPOverhead does.
// check_% is the median ratio minus one; divide it by N for
// CheckReplicasEvery N. digest_GB/s is the hashing alone.
func BenchmarkReplicaCheck(b *testing.B) {
	ctx := context.Background()
	m := benchMLP(b, 1)
	if err := m.wrap(ctx, world(b, 1)[0], Options{Hook: newDoneHook()}); err != nil {
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
	check := func() {
		if err := m.ddp.VerifyReplicas(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for range 3 { // past the rebuild
		step()
	}
	var bytes int
	values, err := m.ddp.ParamTensors()
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range values {
		bytes += len(v.Data)
	}
	var ratios []float64
	var tc time.Duration
	for b.Loop() {
		t0 := time.Now()
		step()
		t1 := time.Now()
		step()
		t2 := time.Now()
		check()
		t3 := time.Now()
		plain, checked := t1.Sub(t0), t3.Sub(t1)
		tc += t3.Sub(t2)
		ratios = append(ratios, checked.Seconds()/plain.Seconds())
	}
	slices.Sort(ratios)
	b.ReportMetric(100*(ratios[len(ratios)/2]-1), "check_%")
	b.ReportMetric(float64(tc.Nanoseconds())/float64(b.N), "check_ns")
	b.ReportMetric(float64(bytes)*float64(b.N)/tc.Seconds()/1e9, "check_GB/s")
}

// BenchmarkNonFiniteGuard is the cost of Options.CheckFinite (the
// reducer's scan of the averaged gradients for NaN and infinities) on the
// benchmark MLP (1 rank, 3.7 MB of float32 gradients, a hook that
// communicates nothing): a step without it against a step with it, timed
// in alternation. guard_% is the median ratio minus one.
func BenchmarkNonFiniteGuard(b *testing.B) {
	ctx := context.Background()
	models := make([]*mlp[float32], 2)
	for k, check := range []bool{false, true} {
		m := benchMLP(b, 1)
		if err := m.wrap(ctx, world(b, 1)[0], Options{Hook: newDoneHook(), CheckFinite: check}); err != nil {
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
	var ratios []float64
	for b.Loop() {
		var plain, guarded time.Duration
		if len(ratios)%2 == 0 {
			plain, guarded = step(models[0]), step(models[1])
		} else {
			guarded, plain = step(models[1]), step(models[0])
		}
		ratios = append(ratios, guarded.Seconds()/plain.Seconds())
	}
	slices.Sort(ratios)
	b.ReportMetric(100*(ratios[len(ratios)/2]-1), "guard_%")
}
