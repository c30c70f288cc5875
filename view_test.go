package ddp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// GradientAsBucketView: N ranks equal one process on the whole batch, as
// without views, and the replicas end bitwise equal to the same run
// without views.
func TestGradientAsBucketViewParity(t *testing.T) {
	view := func(o Options) Options { o.GradientAsBucketView = true; return o }
	cases := []parityCase{
		{"local", 2, "sgd", view(oneParamPerBucket())},
		{"local", 3, "adam", view(fewBuckets())},
		{"tcp", 2, "adam", view(oneBucket())},
	}
	for _, c := range cases {
		t.Run(c.String()+"/float64", func(t *testing.T) { testParity[float64](t, c, tol64) })
	}
	c := parityCase{"local", 2, "adam", view(fewBuckets())}
	t.Run(c.String()+"/float32", func(t *testing.T) { testParity[float32](t, c, tol32) })
}

// schedule is one training run: steps × micro micro-batches per step, all
// but the last of each step RunAllNoSync.
type schedule struct {
	n, steps, micro int
	extra           bool // the model has a parameter the loss never reaches
}

// viewRun is what a run leaves: every rank's values at the end, and rank
// 0's reduced gradients after each step.
type viewRun struct {
	values [][][]float64
	grads  [][][]float64
	copies []reducer.CopyStats
	placed []int64
}

func runSchedule(t *testing.T, ctx context.Context, s schedule, opts Options) viewRun {
	t.Helper()
	spec := mlpSpec{sizes: mlpSizes(), rows: parityRows, extra: s.extra}
	data := func(step, r, m int) batch[float64] {
		return makeBatch[float64](spec, s.n*parityRows, uint64(1000*step+10*m)).shard(r, parityRows)
	}
	replicas := startReplicas[float64](t, ctx, groupsOf(t, "local", s.n), spec, opts)
	out := viewRun{values: make([][][]float64, s.n), grads: make([][][]float64, s.steps),
		copies: make([]reducer.CopyStats, s.n), placed: make([]int64, s.n)}
	noErrors(t, parallel(s.n, func(r int) error {
		d, solver := replicas[r], newSolver("adam")
		for step := range s.steps {
			for m := range s.micro {
				if err := d.feed(data(step, r, m)); err != nil {
					return err
				}
				if m < s.micro-1 {
					if err := d.ddp.RunAllNoSync(ctx, d.vm); err != nil {
						return err
					}
					d.vm.Reset()
					continue
				}
				if err := d.ddp.RunAll(ctx, d.vm); err != nil {
					return err
				}
			}
			if err := checkAliasing(d, opts.GradientAsBucketView); err != nil {
				return fmt.Errorf("rank %d step %d: %w", r, step, err)
			}
			if r == 0 {
				out.grads[step] = d.gradients()
			}
			if err := d.step(solver); err != nil {
				return err
			}
		}
		out.values[r] = d.values()
		out.copies[r] = d.ddp.Reducer().CopyStats()
		out.placed[r] = d.ddp.PlacedBytes()
		return nil
	}))
	return out
}

// checkAliasing checks that each gradient the solver will read is its
// bucket view exactly when views are on.
func checkAliasing(m *mlp[float64], views bool) error {
	for i, gr := range m.grads {
		if gr == nil {
			continue // a parameter the loss does not reach has no gradient
		}
		g := gr.Value().Data().([]float64)
		b := m.ddp.Reducer().Gradient(i)
		same := unsafe.SliceData(g) == (*float64)(unsafe.Pointer(unsafe.SliceData(b.Data))) && len(g) == b.Len()
		if same != views {
			return fmt.Errorf("parameter %d: gradient is its bucket view: %v, want %v", i, same, views)
		}
	}
	return nil
}

// Views change where gradients live, not one bit of what training
// computes: with synchronised steps, with no_sync accumulation across the
// bucket rebuild, with one bucket per parameter and with a few.
func TestGradientAsBucketViewBitwise(t *testing.T) {
	ctx := testCtx(t)
	for _, c := range []struct {
		name string
		s    schedule
		opts Options
	}{
		{"sync/oneParamPerBucket", schedule{n: 2, steps: 4, micro: 1}, oneParamPerBucket()},
		{"nosync/fewBuckets", schedule{n: 2, steps: 3, micro: 3}, Options{BucketCapBytes: 256, FirstBucketBytes: 64}},
		{"nosync/N=3/oneBucket", schedule{n: 3, steps: 2, micro: 2}, oneBucket()},
		{"unused/FindUnusedParameters", schedule{n: 2, steps: 3, micro: 2, extra: true},
			Options{FindUnusedParameters: true, BucketCapBytes: 256, FirstBucketBytes: 64}},
		{"unused/StaticGraph", schedule{n: 2, steps: 3, micro: 1, extra: true},
			Options{StaticGraph: true, BucketCapBytes: 256, FirstBucketBytes: 64}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain := runSchedule(t, ctx, c.s, c.opts)
			vo := c.opts
			vo.GradientAsBucketView = true
			views := runSchedule(t, ctx, c.s, vo)
			for step := range c.s.steps {
				if p, k := firstBitDiff(views.grads[step], plain.grads[step]); p >= 0 {
					t.Fatalf("step %d: reduced gradient of parameter %d [%d] = %v with views, %v without", step, p, k,
						views.grads[step][p][k], plain.grads[step][p][k])
				}
			}
			for r := range c.s.n {
				if p, k := firstBitDiff(views.values[r], plain.values[r]); p >= 0 {
					t.Fatalf("rank %d: parameter %d [%d] = %v with views, %v without", r, p, k, views.values[r][p][k],
						plain.values[r][p][k])
				}
				pc, vc := plain.copies[r], views.copies[r]
				if pc.In == 0 || pc.Out == 0 || pc.InPlace != 0 || plain.placed[r] != 0 {
					t.Errorf("rank %d without views: copies %+v, placed %d; want copies in and out, none in place", r, pc,
						plain.placed[r])
				}
				if vc.In != 0 || vc.Out != 0 || vc.Fallbacks != 0 || vc.InPlace != pc.In || views.placed[r] != pc.In {
					t.Errorf("rank %d with views: copies %+v, placed %d; want no reducer copy and %d bytes placed in the buckets by "+
						"the hooks", r, vc, views.placed[r], pc.In)
				}
			}
			t.Logf("bytes copied per run and rank: without views in %d + out %d; with views in %d + out %d, placed by the "+
				"hooks %d",
				plain.copies[0].In, plain.copies[0].Out, views.copies[0].In, views.copies[0].Out, views.placed[0])
		})
	}
}

// The bare reducer: a gradient passed as its GradientBuffer is neither
// copied in nor back, and one that is not is copied and counted as a
// fallback.
func TestReducerBucketViewFallback(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 2)
	gs := world(t, 2)
	noErrors(t, onRanks(gs, func(rank int, g pg.ProcessGroup) error {
		r, err := reducer.New(ctx, g, params, Options{GradientAsBucketView: true})
		if err != nil {
			return err
		}
		if err := r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
			return err
		}
		own := pg.NewTensor(pg.Float64, params[0].Numel())
		for k := range pg.View[float64](own) {
			pg.View[float64](own)[k] = float64(rank + 1)
		}
		if err := r.MarkReady(0, own); err != nil {
			return err
		}
		placed := r.GradientBuffer(1)
		for k := range pg.View[float64](placed) {
			pg.View[float64](placed)[k] = float64(10 * (rank + 1))
		}
		if err := r.MarkReady(1, placed); err != nil {
			return err
		}
		if err := r.Finalize(ctx); err != nil {
			return err
		}
		if got := pg.View[float64](own)[0]; got != 1.5 {
			return fmt.Errorf("copied gradient = %v, want 1.5", got)
		}
		if got := pg.View[float64](placed)[0]; got != 15 {
			return fmt.Errorf("placed gradient = %v, want 15", got)
		}
		st := r.CopyStats()
		b0, b1 := int64(8*params[0].Numel()), int64(8*params[1].Numel())
		if st != (reducer.CopyStats{In: b0, Out: b0, InPlace: b1, Fallbacks: 1}) {
			return fmt.Errorf("CopyStats = %+v, want In=Out=%d, InPlace=%d, Fallbacks=1", st, b0, b1)
		}
		return nil
	}))
}

// Note [bucket views in Gorgonia], checked: binding a buffer to a
// gradient node (UnsafeLet, the only way to give an op node a value) does
// not make the TapeMachine compute the gradient into it. Every op's result
// is fresh memory, so a gradient can reach a bucket only by a copy.
func TestGorgoniaCannotComputeIntoBuffer(t *testing.T) {
	ctx := testCtx(t)
	spec := mlpSpec{sizes: mlpSizes(), rows: parityRows}
	m := newMLP[float64](t, spec, referenceSeed).mustBuild(t)
	if err := m.feed(makeBatch[float64](spec, parityRows, 7)); err != nil {
		t.Fatal(err)
	}
	bufs := make([][]float64, len(m.grads))
	for i, gr := range m.grads {
		bufs[i] = make([]float64, gr.Shape().TotalSize())
		if err := G.UnsafeLet(gr,
			tensor.New(tensor.WithShape(gr.Shape().Clone()...), tensor.WithBacking(bufs[i]))); err != nil {
			t.Fatalf("parameter %d: %v", i, err)
		}
	}
	if err := m.run(ctx); err != nil {
		t.Fatal(err)
	}
	for i, gr := range m.grads {
		g := gr.Value().Data().([]float64)
		if unsafe.SliceData(g) == unsafe.SliceData(bufs[i]) {
			t.Errorf("parameter %d (%v): the gradient was computed into the bound buffer; Gorgonia can preallocate it, and "+
				"the copy in placeGradient may be avoidable", i, gr.Op())
		}
		for _, v := range bufs[i] {
			if v != 0 {
				t.Errorf("parameter %d: the bound buffer was written", i)
				break
			}
		}
	}
}

// Gorgonia cannot compute float16 gradients, so Wrap refuses
// MixedPrecision with advice, before any collective.
func TestWrapRefusesMixedPrecision(t *testing.T) {
	ctx := testCtx(t)
	m := newMLP[float32](t, mlpSpec{sizes: mlpSizes(), rows: parityRows}, referenceSeed)
	noErrors(t, onRanks(world(t, 1), func(_ int, g pg.ProcessGroup) error {
		_, err := Wrap(ctx, g, m.params, Options{MixedPrecision: &reducer.MixedPrecision{ParamDtype: pg.Float16}})
		if err == nil || !strings.Contains(err.Error(), "Gorgonia cannot compute") {
			return fmt.Errorf("Wrap with MixedPrecision: err = %v, want a refusal saying why", err)
		}
		return nil
	}))
}
