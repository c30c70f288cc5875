package ddp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
	G "gorgonia.org/gorgonia"
)

// The tests of this file are the proof that DDP over Gorgonia is data
// parallelism: N replicas, each on its shard of a batch, end where one
// process trained on the whole batch ends, and end bitwise identical.

const (
	paritySteps          = 5 // K
	parityRows           = 4 // B, the local batch
	referenceSeed uint64 = 1
)

// Tolerances, relative to each parameter's largest element.
const (
	tol64 = 1e-12
	tol32 = 1e-5
)

type parityCase struct {
	backend string // "local" or "tcp"
	n       int
	solver  string // "sgd" or "adam"
	opts    Options
}

func (c parityCase) String() string {
	return fmt.Sprintf("%s/N=%d/%s/cap=%d", c.backend, c.n, c.solver, c.opts.BucketCapBytes)
}

// Bucket caps from one parameter per bucket to a single bucket.
func oneParamPerBucket() Options { return Options{BucketCapBytes: 8, FirstBucketBytes: 8} }
func fewBuckets() Options        { return Options{BucketCapBytes: 1024, FirstBucketBytes: 256} }
func oneBucket() Options         { return Options{} } // DDP's defaults: the model fits the first bucket

func TestGorgoniaParity(t *testing.T) {
	cases := []parityCase{
		{"local", 1, "sgd", oneBucket()},
		{"local", 2, "sgd", oneParamPerBucket()},
		{"local", 2, "adam", fewBuckets()},
		{"local", 3, "sgd", fewBuckets()},
		{"local", 3, "adam", oneParamPerBucket()},
		{"local", 4, "adam", oneBucket()},
		{"tcp", 2, "adam", oneParamPerBucket()},
		{"tcp", 3, "sgd", fewBuckets()},
		{"tcp", 3, "adam", oneBucket()},
	}
	for _, c := range cases {
		t.Run(c.String()+"/float64", func(t *testing.T) { testParity[float64](t, c, tol64) })
	}
	for _, solver := range []string{"sgd", "adam"} {
		c := parityCase{"local", 3, solver, fewBuckets()}
		t.Run(c.String()+"/float32", func(t *testing.T) { testParity[float32](t, c, tol32) })
	}
}

// testParity trains c.n replicas for K steps, rank r on rows
// [r·B, (r+1)·B) of each step's batch, and one plain model on all N·B
// rows. Rank 0 starts from the reference's values; the other ranks start
// from values of their own, so Wrap's broadcast is needed.
func testParity[T float](t *testing.T, c parityCase, tol float64) {
	ctx := testCtx(t)
	spec := mlpSpec{sizes: mlpSizes(), rows: parityRows}
	data := func(step int) batch[T] { return makeBatch[T](spec, c.n*parityRows, uint64(100+step)) }

	replicas := startReplicas[T](t, ctx, groupsOf(t, c.backend, c.n), spec, c.opts)
	noErrors(t, parallel(len(replicas), func(r int) error {
		return replicas[r].train(ctx, newSolver(c.solver), paritySteps, func(step int) batch[T] {
			return data(step).shard(r, parityRows)
		})
	}))

	ref := newMLP[T](t, mlpSpec{sizes: spec.sizes, rows: c.n * parityRows}, referenceSeed).mustBuild(t)
	start := ref.values()
	if err := ref.train(ctx, newSolver(c.solver), paritySteps, data); err != nil {
		t.Fatal(err)
	}
	if relErr(ref.values(), start) < 100*tol {
		t.Fatalf("the reference barely trained; the comparison would prove nothing")
	}
	checkReplicas(t, replicas, ref.values(), tol)
}

// startReplicas builds one replica per rank, rank 0 from referenceSeed
// and the others from seeds of their own, and wraps them (which copies
// rank 0's values to every rank).
func startReplicas[T float](t *testing.T, ctx context.Context, gs []pg.ProcessGroup, spec mlpSpec,
	opts Options) []*mlp[T] {
	t.Helper()
	replicas := make([]*mlp[T], len(gs))
	for r := range replicas {
		replicas[r] = newMLP[T](t, spec, referenceSeed+uint64(1000*r))
	}
	if len(gs) > 1 {
		if p, _ := firstBitDiff(replicas[0].values(), replicas[1].values()); p < 0 {
			t.Fatal("ranks 0 and 1 start from the same values: the broadcast would go untested")
		}
	}
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error { return replicas[r].wrap(ctx, g, opts) }))
	for _, m := range replicas {
		m.mustBuild(t) // one at a time: Gorgonia's graph building is not concurrent-safe
	}
	return replicas
}

// checkReplicas checks that every replica holds rank 0's parameters
// bitwise, and rank 0's are want within tol.
func checkReplicas[T float](t *testing.T, replicas []*mlp[T], want [][]T, tol float64) {
	t.Helper()
	got := replicas[0].values()
	for r, m := range replicas[1:] {
		if p, k := firstBitDiff(m.values(), got); p >= 0 {
			t.Errorf("rank %d: %s[%d] = %v, rank 0 has %v: replicas are not bitwise identical",
				r+1, m.params[p].Name(), k, m.values()[p][k], got[p][k])
		}
	}
	if e := relErr(got, want); e > tol {
		t.Errorf("DDP differs from one process on the whole batch by %.3g (relative), want at most %g", e, tol)
	} else {
		t.Logf("relative difference from the single-process reference: %.3g", e)
	}
}

// Gradient accumulation (no_sync): k-1 RunAllNoSync micro-batches, then a
// RunAll, give every rank the average over ranks of its summed
// micro-batch gradients, through the bucket rebuild.
func TestGorgoniaNoSyncAccumulation(t *testing.T) {
	const n, micro, steps = 2, 3, 2
	ctx := testCtx(t)
	spec := mlpSpec{sizes: mlpSizes(), rows: parityRows}
	// data(s, r, m) is rank r's m-th micro-batch of step s.
	data := func(s, r, m int) batch[float64] {
		return makeBatch[float64](spec, n*parityRows, uint64(1000*s+10*m)).shard(r, parityRows)
	}

	// The reference: a plain model (as the replicas, rank 0's values) runs
	// every rank's micro-batches, sums each rank's gradients, and averages
	// the sums over ranks; then it steps.
	ref := newMLP[float64](t, spec, referenceSeed).mustBuild(t)
	refSolver := newSolver("sgd")
	wantGrads := make([][][]float64, steps)   // step -> parameter -> gradient
	wantLocal := make([][][][]float64, steps) // step -> rank -> parameter -> the last no-sync micro-batch's own gradient
	for s := range steps {
		avg := zerosLike(ref.values())
		wantLocal[s] = make([][][]float64, n)
		for r := range n {
			sum := zerosLike(ref.values())
			for m := range micro {
				if err := ref.feed(data(s, r, m)); err != nil {
					t.Fatal(err)
				}
				if err := ref.run(ctx); err != nil {
					t.Fatal(err)
				}
				ref.vm.Reset()
				g := ref.gradients()
				if m == micro-2 {
					wantLocal[s][r] = g
				}
				addTo(sum, g, 1)
			}
			addTo(avg, sum, 1/float64(n))
		}
		wantGrads[s] = avg
		for i, gr := range ref.grads { // the solver reads the gradient values: make them the average
			copy(gr.Value().Data().([]float64), avg[i])
		}
		if err := refSolver.Step(G.NodesToValueGrads(ref.params)); err != nil {
			t.Fatal(err)
		}
	}

	// Small buckets, so the rebuild after the first synchronised
	// iteration moves accumulated gradients between bucket layouts.
	opts := Options{BucketCapBytes: 256, FirstBucketBytes: 64}
	replicas := startReplicas[float64](t, ctx, groupsOf(t, "local", n), spec, opts)
	noErrors(t, parallel(len(replicas), func(r int) error {
		d, solver := replicas[r], newSolver("sgd")
		for s := range steps {
			for m := range micro {
				if err := d.feed(data(s, r, m)); err != nil {
					return err
				}
				if m < micro-1 {
					if err := d.ddp.RunAllNoSync(ctx, d.vm); err != nil {
						return err
					}
					d.vm.Reset()
					if m == micro-2 {
						if e := relErr(d.gradients(), wantLocal[s][r]); e > tol64 {
							t.Errorf("rank %d step %d: after RunAllNoSync the gradients should be this rank's own; they differ by %.3g", r,
								s, e)
						}
					}
					continue
				}
				if err := d.ddp.RunAll(ctx, d.vm); err != nil {
					return err
				}
			}
			if e := relErr(d.gradients(), wantGrads[s]); e > tol64 {
				t.Errorf("rank %d step %d: the reduced gradients differ from the reference's average of summed micro-batch "+
					"gradients by %.3g", r, s, e)
			}
			if err := d.step(solver); err != nil {
				return err
			}
		}
		return nil
	}))
	checkReplicas(t, replicas, ref.values(), tol64)
}

func zerosLike(v [][]float64) [][]float64 {
	out := make([][]float64, len(v))
	for i := range v {
		out[i] = make([]float64, len(v[i]))
	}
	return out
}

// addTo sets dst += scale·src, element-wise.
func addTo(dst, src [][]float64, scale float64) {
	for i := range src {
		for k, v := range src[i] {
			dst[i][k] += scale * v
		}
	}
}

// A parameter the loss never reaches, on every rank: with
// FindUnusedParameters the model trains like the reference and that
// parameter is left alone; without it, Grad refuses the model, naming it.
func TestGorgoniaUnusedParameter(t *testing.T) {
	const n = 2
	ctx := testCtx(t)
	spec := mlpSpec{sizes: mlpSizes(), rows: parityRows, extra: true}
	data := func(step int) batch[float64] { return makeBatch[float64](spec, n*parityRows, uint64(200+step)) }
	extra := 2 * (len(spec.sizes) - 1)

	t.Run("FindUnusedParameters", func(t *testing.T) {
		opts := Options{FindUnusedParameters: true, BucketCapBytes: 256, FirstBucketBytes: 64}
		replicas := startReplicas[float64](t, ctx, groupsOf(t, "local", n), spec, opts)
		initial := newMLP[float64](t, spec, referenceSeed).values()[extra]
		for r, m := range replicas {
			if got := m.ddp.Unused(); len(got) != 1 || got[0] != extra {
				t.Fatalf("rank %d: Unused() = %v, want [%d]", r, got, extra)
			}
			if m.grads[extra] != nil {
				t.Fatalf("rank %d: side.weight has a gradient node", r)
			}
		}
		noErrors(t, parallel(len(replicas), func(r int) error {
			return replicas[r].train(ctx, newSolver("adam"), paritySteps, func(step int) batch[float64] {
				return data(step).shard(r, parityRows)
			})
		}))
		for r, m := range replicas {
			got := m.values()[extra]
			if p, k := firstBitDiff([][]float64{got}, [][]float64{initial}); p >= 0 {
				t.Errorf("rank %d: side.weight[%d] = %v, want rank 0's initial %v: an unused parameter was changed", r, k, got[k],
					initial[k])
			}
			if g, err := m.params[extra].Grad(); err == nil || g != nil {
				t.Errorf("rank %d: side.weight has gradient %v (err %v); it should have none", r, g, err)
			}
			if v := pg.View[float64](m.ddp.Reducer().Gradient(extra)); slices.ContainsFunc(v,
				func(x float64) bool { return x != 0 }) {
				t.Errorf("rank %d: side.weight was reduced as %v, want zeros", r, v)
			}
		}
		ref := newMLP[float64](t, mlpSpec{sizes: spec.sizes, rows: n * parityRows, extra: true}, referenceSeed).mustBuild(t)
		if err := ref.train(ctx, newSolver("adam"), paritySteps, data); err != nil {
			t.Fatal(err)
		}
		checkReplicas(t, replicas, ref.values(), tol64)
	})

	t.Run("without the option", func(t *testing.T) {
		gs := groupsOf(t, "local", n)
		replicas := make([]*mlp[float64], n)
		for r := range replicas {
			replicas[r] = newMLP[float64](t, spec, referenceSeed)
		}
		noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error { return replicas[r].wrap(ctx, g, Options{}) }))
		for r, m := range replicas {
			err := m.build(t)
			if err == nil {
				t.Fatalf("rank %d: Grad accepted a model with an unused parameter without FindUnusedParameters", r)
			}
			for _, want := range []string{"side.weight", "FindUnusedParameters"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: error %q does not mention %q", r, err, want)
				}
			}
			if err := m.ddp.RunAll(ctx, nil); err == nil {
				t.Errorf("rank %d: RunAll after a failed Grad = %v, want an error", r, err)
			}
		}
	})
}
