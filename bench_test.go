package ddp

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/goddp/ddp/reducer"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/pg"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Note [Reading the reducer benchmarks]
//
// The targets are about the 784-512-512-512-10 MLP, float32,
// batch 64: the reducer's bookkeeping and copies must take under 5% of
// its step, and the mark-ready path must allocate nothing in steady state.
//
//   - BenchmarkMarkReady/iteration is one whole steady-state iteration on
//     a 1-rank reducer holding that MLP's parameters: Prepare, MarkReady
//     of every gradient in reverse order (as backward produces them),
//     Finalize. The comm hook returns a Work that has already finished,
//     so the figure is the reducer alone: bookkeeping, the copy of each
//     gradient into its bucket and the copy back. It must report
//     0 allocs/op.
//   - BenchmarkMarkReady/isolated is MarkReady alone, for a gradient that
//     does not complete its bucket. Iteration boundaries (one in 1023
//     calls) run with the timer stopped, so neither their time nor their
//     allocations count.
//   - BenchmarkMLPStep is the plain MLP's RunAll (forward and backward)
//     and Reset: the step the overhead is measured against.
//   - BenchmarkReducerOverhead interleaves, in every loop, one plain MLP
//     step and one reducer iteration on that step's real gradients, each
//     timed on its own, and reports reducer_ns, step_ns and overhead_% =
//     100·reducer/step: the two are measured in the same run, so machine
//     noise moves both.
//   - BenchmarkMarkReadyHook is BenchmarkMarkReady/iteration with each
//     gradient handed over as Gorgonia's hooks do, as a *tensor.Dense
//     through DDP's hook function (TensorOf, then MarkReady).
//     TestMarkReadyAllocatesNothing holds the same path to 0 allocations
//     in every test run.
//   - BenchmarkDDPOverhead interleaves, in alternating order, a plain
//     step with the same step run through DDP on one rank with the
//     finished-Work hook: the whole in-graph cost of DDP (hook ops,
//     MarkReady, Finalize) without communication. ddp_overhead_% is the
//     median over loops of 100·(ddp/plain − 1). It is the difference of
//     two noisy figures, ±5% from run to run on a shared machine: read
//     its median over -count, and trust BenchmarkReducerOverhead more.
//
// The model of these benchmarks is mlp_test's builder, with tanh between
// the layers; bench/ddpstep uses relu. tanh costs a little more than
// relu, which lengthens the step slightly and leaves the reducer's cost
// unchanged.

// benchSizes are the widths of the MLP, input first.
func benchSizes() []int { return []int{784, 512, 512, 512, 10} }

const benchRows = 64

// doneHook is a comm hook that communicates nothing and returns a Work
// that has already finished, the same one every time: unlike
// commhook.Noop it allocates nothing, so a benchmark counts only the
// reducer's allocations.
type doneHook struct{ w pg.Work }

func newDoneHook() doneHook { return doneHook{w: pg.Completed(nil)} }

func (h doneHook) Run(context.Context, pg.ProcessGroup, *commhook.GradBucket) pg.Work { return h.w }

// benchParams describes a float32 MLP's parameters: fc1.weight,
// fc1.bias, fc2.weight, ...
func benchParams(sizes ...int) []reducer.Param {
	var ps []reducer.Param
	for i := 0; i+1 < len(sizes); i++ {
		ps = append(ps,
			reducer.Param{Name: fmt.Sprintf("fc%d.weight", i+1), Shape: []int{sizes[i], sizes[i+1]}, Dtype: pg.Float32},
			reducer.Param{Name: fmt.Sprintf("fc%d.bias", i+1), Shape: []int{1, sizes[i+1]}, Dtype: pg.Float32})
	}
	return ps
}

// benchReducer builds a 1-rank reducer over params with the finished-Work
// hook, and runs iterations until its buckets are rebuilt: what is left
// is the steady state.
func benchReducer(b *testing.B, params []reducer.Param, opts Options, grads []pg.Tensor) *reducer.Reducer {
	b.Helper()
	ctx := context.Background()
	opts.Hook = newDoneHook()
	r, err := reducer.New(ctx, world(b, 1)[0], params, opts)
	if err != nil {
		b.Fatal(err)
	}
	for range 3 { // record the ready order, rebuild, then one more
		if err := iterate(ctx, r, grads); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// iterate is one synchronised iteration, gradients marked last first.
func iterate(ctx context.Context, r *reducer.Reducer, grads []pg.Tensor) error {
	if err := r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
		return err
	}
	for i := len(grads) - 1; i >= 0; i-- {
		if err := r.MarkReady(i, grads[i]); err != nil {
			return err
		}
	}
	return r.Finalize(ctx)
}

// randomGrads gives each parameter a float32 gradient of its size.
func randomGrads(params []reducer.Param) []pg.Tensor {
	out := make([]pg.Tensor, len(params))
	for i, p := range params {
		out[i] = pg.Float32s(uniform[float32](p.Numel(), 1, uint64(i), 1))
	}
	return out
}

func BenchmarkMarkReady(b *testing.B) {
	b.Run("iteration", func(b *testing.B) {
		params := benchParams(benchSizes()...)
		grads := randomGrads(params)
		r := benchReducer(b, params, Options{}, grads)
		b.Logf("buckets after the rebuild: %v", r.Buckets())
		ctx := context.Background()
		b.ReportAllocs()
		var bytes int64
		for _, g := range grads {
			bytes += int64(len(g.Data))
		}
		b.SetBytes(bytes)
		for b.Loop() {
			if err := iterate(ctx, r, grads); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("isolated", func(b *testing.B) {
		// One bucket of many bias-sized parameters: every MarkReady but
		// the iteration's last leaves the bucket incomplete.
		const n, numel = 1024, 512
		params := make([]reducer.Param, n)
		for i := range params {
			params[i] = reducer.Param{Name: fmt.Sprintf("p%d", i), Shape: []int{numel}, Dtype: pg.Float32}
		}
		grads := randomGrads(params)
		r := benchReducer(b, params, Options{BucketCapBytes: 1 << 30, FirstBucketBytes: 1 << 30}, grads)
		if len(r.Buckets()) != 1 {
			b.Fatalf("want one bucket, got %d", len(r.Buckets()))
		}
		ctx := context.Background()
		next := n - 1 // the next parameter to mark; 0 completes the bucket
		restart := func() {
			b.StopTimer()
			if err := r.MarkReady(0, grads[0]); err != nil {
				b.Fatal(err)
			}
			if err := r.Finalize(ctx); err != nil {
				b.Fatal(err)
			}
			if err := r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
				b.Fatal(err)
			}
			next = n - 1
			b.StartTimer()
		}
		if err := r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetBytes(numel * 4)
		for b.Loop() {
			if next == 0 {
				restart()
			}
			if err := r.MarkReady(next, grads[next]); err != nil {
				b.Fatal(err)
			}
			next--
		}
	})
}

// TestMarkReadyAllocatesNothing holds the steady-state iteration to the
// target of BenchmarkMarkReady and BenchmarkMarkReadyHook in every test
// run: gradients arrive as Gorgonia values, through TensorOf, and no call
// allocates. It also checks that TensorOf views the value's memory.
func TestMarkReadyAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	params := benchParams(8, 16, 4)
	values := make([]*tensor.Dense, len(params))
	for i, p := range params {
		values[i] = tensor.New(tensor.WithShape(p.Shape...), tensor.WithBacking(uniform[float32](p.Numel(), 1, uint64(i), 1)))
	}
	r, err := reducer.New(ctx, world(t, 1)[0], params,
		Options{Hook: newDoneHook(), BucketCapBytes: 256, FirstBucketBytes: 64})
	if err != nil {
		t.Fatal(err)
	}
	iteration := func() {
		if err := r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
			t.Fatal(err)
		}
		for i := len(values) - 1; i >= 0; i-- {
			g, err := gtensor.TensorOf(values[i])
			if err != nil {
				t.Fatal(err)
			}
			if err := r.MarkReady(i, g); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Finalize(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // past the rebuild
		iteration()
	}
	if n := len(r.Buckets()); n < 2 {
		t.Fatalf("%d buckets; the test wants several", n)
	}
	if allocs := testing.AllocsPerRun(20, iteration); allocs != 0 {
		t.Errorf("a steady-state iteration allocates %v times; want 0", allocs)
	}
	g, err := gtensor.TensorOf(values[0])
	if err != nil {
		t.Fatal(err)
	}
	pg.View[float32](g)[3] = 42
	if got := values[0].Float32s()[3]; got != 42 {
		t.Errorf("TensorOf copied the value: wrote 42 through it, the value holds %v", got)
	}
}

// BenchmarkMarkReadyHook is an iteration as Gorgonia's hooks drive it:
// each gradient arrives as a Gorgonia value, through DDP's hook function
// (TensorOf, then MarkReady). It must report 0 allocs/op too.
func BenchmarkMarkReadyHook(b *testing.B) {
	ctx := context.Background()
	m := benchMLP(b, 1)
	d, err := Wrap(ctx, world(b, 1)[0], m.params, Options{Hook: newDoneHook()})
	if err != nil {
		b.Fatal(err)
	}
	values := make([]G.Value, len(m.params))
	for i, p := range m.params {
		values[i] = tensor.New(tensor.WithShape(p.Shape()...),
			tensor.WithBacking(uniform[float32](p.Shape().TotalSize(), 1, uint64(i), 1)))
	}
	iteration := func() {
		if err := d.r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
			b.Fatal(err)
		}
		for i := len(values) - 1; i >= 0; i-- {
			if err := d.onGradient(i, values[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := d.r.Finalize(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for range 3 { // past the rebuild
		iteration()
	}
	b.ReportAllocs()
	for b.Loop() {
		iteration()
	}
}

// benchMLP builds the MLP, float32, with a fixed batch bound.
func benchMLP(b *testing.B, seed uint64) *mlp[float32] {
	b.Helper()
	spec := mlpSpec{sizes: benchSizes(), rows: benchRows}
	m := newMLP[float32](b, spec, seed)
	return m
}

// feedBench binds the same batch to every model built by benchMLP.
func feedBench(b *testing.B, m *mlp[float32]) {
	b.Helper()
	if err := m.feed(makeBatch[float32](m.spec, benchRows, 3)); err != nil {
		b.Fatal(err)
	}
}

// plainStep is one step of the plain model without the solver: RunAll
// and Reset. The solver is left out of every figure here; it would only
// make the step longer and the overhead look smaller.
func plainStep(b *testing.B, m *mlp[float32]) {
	if err := m.vm.RunAll(); err != nil {
		b.Fatal(err)
	}
	m.vm.Reset()
}

func BenchmarkMLPStep(b *testing.B) {
	m := benchMLP(b, 1).mustBuild(b)
	feedBench(b, m)
	plainStep(b, m)
	b.ReportAllocs()
	for b.Loop() {
		plainStep(b, m)
	}
}

func BenchmarkReducerOverhead(b *testing.B) {
	m := benchMLP(b, 1).mustBuild(b)
	feedBench(b, m)
	params := benchParams(benchSizes()...)
	// The reducer works on the step's own gradients, read after RunAll
	// and before Reset, as DDP's hooks hand them over.
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
	r := benchReducer(b, params, Options{}, grads)
	m.vm.Reset()
	ctx := context.Background()
	var step, red time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := m.vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		gradsOf()
		t2 := time.Now()
		if err := iterate(ctx, r, grads); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		m.vm.Reset()
		step += t1.Sub(t0) + time.Since(t3)
		red += t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(step.Nanoseconds())/n, "step_ns")
	b.ReportMetric(float64(red.Nanoseconds())/n, "reducer_ns")
	b.ReportMetric(100*red.Seconds()/step.Seconds(), "overhead_%")
}

func BenchmarkDDPOverhead(b *testing.B) {
	ctx := context.Background()
	plain := benchMLP(b, 1).mustBuild(b)
	feedBench(b, plain)
	ddp := benchMLP(b, 1)
	if err := ddp.wrap(ctx, world(b, 1)[0], Options{Hook: newDoneHook()}); err != nil {
		b.Fatal(err)
	}
	ddp.mustBuild(b)
	feedBench(b, ddp)
	ddpStep := func() {
		if err := ddp.ddp.RunAll(ctx, ddp.vm); err != nil {
			b.Fatal(err)
		}
		ddp.vm.Reset()
	}
	for range 3 { // past the rebuild
		ddpStep()
	}
	plainStep(b, plain)
	// Each loop times both steps, in alternating order, and keeps their
	// ratio: the median of those ratios resists the machine's bursts
	// better than a ratio of sums.
	var tp, td time.Duration
	var ratios []float64
	for b.Loop() {
		first, second := func() { plainStep(b, plain) }, ddpStep
		if len(ratios)%2 == 1 {
			first, second = second, first
		}
		t0 := time.Now()
		first()
		t1 := time.Now()
		second()
		t2 := time.Now()
		p, d := t1.Sub(t0), t2.Sub(t1)
		if len(ratios)%2 == 1 {
			p, d = d, p
		}
		tp, td = tp+p, td+d
		ratios = append(ratios, d.Seconds()/p.Seconds())
	}
	n := float64(b.N)
	b.ReportMetric(float64(tp.Nanoseconds())/n, "plain_ns")
	b.ReportMetric(float64(td.Nanoseconds())/n, "ddp_ns")
	slices.Sort(ratios)
	b.ReportMetric(100*(ratios[len(ratios)/2]-1), "ddp_overhead_%")
}
