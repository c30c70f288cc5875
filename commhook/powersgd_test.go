package commhook_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

func newPowerSGD(t testing.TB, mutate func(*commhook.PowerSGDOptions)) *commhook.PowerSGD {
	t.Helper()
	o := commhook.DefaultPowerSGDOptions()
	o.StartIter = 2
	if mutate != nil {
		mutate(&o)
	}
	h, err := commhook.NewPowerSGD(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestPowerSGDOptions(t *testing.T) {
	o := commhook.DefaultPowerSGDOptions()
	want := commhook.PowerSGDOptions{MatrixApproximationRank: 1, StartIter: 1000, MinCompressionRate: 2,
		UseErrorFeedback: true, WarmStart: true, OrthogonalizationEpsilon: 0, RandomSeed: 0}
	if o != want {
		t.Fatalf("defaults %+v, want torch's %+v", o, want)
	}
	for _, c := range []struct {
		name   string
		mutate func(*commhook.PowerSGDOptions)
		ok     bool
	}{
		{"defaults", func(*commhook.PowerSGDOptions) {}, true},
		{"start 1 with error feedback", func(o *commhook.PowerSGDOptions) { o.StartIter, o.WarmStart = 1, false }, false},
		{"start 1 with warm start", func(o *commhook.PowerSGDOptions) { o.StartIter, o.UseErrorFeedback = 1, false }, false},
		{"start 0 with both", func(o *commhook.PowerSGDOptions) { o.StartIter = 0 }, false},
		{"start 0 with neither",
			func(o *commhook.PowerSGDOptions) { o.StartIter, o.UseErrorFeedback, o.WarmStart = 0, false, false }, true},
		{"start 2", func(o *commhook.PowerSGDOptions) { o.StartIter = 2 }, true},
		{"rank 0", func(o *commhook.PowerSGDOptions) { o.MatrixApproximationRank = 0 }, false},
		{"negative rate", func(o *commhook.PowerSGDOptions) { o.MinCompressionRate = -1 }, false},
		{"NaN epsilon", func(o *commhook.PowerSGDOptions) { o.OrthogonalizationEpsilon = math.NaN() }, false},
	} {
		o := commhook.DefaultPowerSGDOptions()
		c.mutate(&o)
		_, err1 := commhook.NewPowerSGD(o)
		_, err2 := commhook.NewBatchedPowerSGD(o)
		for _, err := range []error{err1, err2} {
			if c.ok != (err == nil) || err != nil && !errors.Is(err, commhook.ErrInvalidConfig) {
				t.Errorf("%s: got %v, want ok=%v", c.name, err, c.ok)
			}
		}
	}
	o.StartIter = 1
	_, err := commhook.NewPowerSGD(o)
	if err == nil || !strings.Contains(err.Error(), "StartIter (start_powerSGD_iter) > 1 if UseErrorFeedback or "+
		"WarmStart is enabled, because PowerSGD can only be applied after the first two iterations in DDP") {
		t.Errorf("the message should be torch's: %v", err)
	}
}

// mlpPlan is a small MLP's parameters in three buckets of different
// sizes, last layer first as the reducer orders them: weights are
// compressed, biases (1-D) and the 3×4 weight are not.
var mlpPlan = [][]layer{{{30, 5}, {5}, {3, 4}}, {{40, 30}, {30}}, {{20, 40}, {40}}}

// Before StartIter, PowerSGD is Allreduce, bit for bit, and the
// iteration counts as the last bucket runs.
func TestPowerSGDBeforeStartIsAllreduce(t *testing.T) {
	const world, start = 3, 4
	gs := localGroups(t, world)
	hooks := make([]*commhook.PowerSGD, world)
	for r := range hooks {
		hooks[r] = newPowerSGD(t, func(o *commhook.PowerSGDOptions) { o.StartIter = start })
	}
	ctx := testCtx(t)
	for it := range start {
		onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
			a, b := newBuckets(pg.Float32, mlpPlan), newBuckets(pg.Float32, mlpPlan)
			randomGrads(a, uint64(it), r, 1)
			randomGrads(b, uint64(it), r, 1)
			if err := iterate(ctx, hooks[r], g, a); err != nil {
				return err
			}
			if err := iterate(ctx, commhook.Allreduce{}, g, b); err != nil {
				return err
			}
			for i := range a {
				if !slices.Equal(a[i].Buffer.Data, b[i].Buffer.Data) {
					t.Errorf("iteration %d bucket %d differs from Allreduce", it, i)
				}
			}
			if hooks[r].Iter() != it+1 {
				t.Errorf("after iteration %d the hook counts %d", it, hooks[r].Iter())
			}
			return nil
		})
	}
	if rate, _, _ := hooks[0].CompressionStats(); rate != 0 {
		t.Errorf("compression rate %v before any compression", rate)
	}
}

// The iteration counts when the last bucket finishes, whatever came
// before it, in both modes.
func TestPowerSGDCountsOnTheLastBucket(t *testing.T) {
	gs := localGroups(t, 1)
	h := newPowerSGD(t, nil)
	ctx := testCtx(t)
	bs := newBuckets(pg.Float64, mlpPlan)
	for it, want := range []int{0, 1, 1, 2, 2, 3} {
		randomGrads(bs, uint64(it), 0, 1)
		run := bs
		if it%2 == 0 {
			run = bs[:2] // an iteration that never reaches the last bucket
		}
		if err := iterate(ctx, h, gs[0], run); err != nil {
			t.Fatal(err)
		}
		if h.Iter() != want {
			t.Fatalf("after run %d (%d buckets): iteration %d, want %d", it, len(run), h.Iter(), want)
		}
	}
}

// A gradient that is exactly rank r comes back from rank-r PowerSGD to
// float tolerance once warm, and the tensors PowerSGD does not compress
// (1-D, or too small to gain: (n+m)·r·2 ≥ n·m) come back as the exact
// average at the first compressed iteration: summed, then divided by the
// world size, as torch does. (Later, error feedback adds each rank's
// last error first, which changes the rounding.)
func TestPowerSGDReconstructsLowRank(t *testing.T) {
	const world = 3
	for _, c := range []struct {
		dtype pg.Dtype
		rank  int
		tol   float64
	}{{pg.Float64, 1, 1e-12}, {pg.Float64, 2, 1e-12}, {pg.Float32, 1, 1e-5}, {pg.Float32, 3, 1e-5}} {
		t.Run(c.dtype.String()+"/rank="+string(rune('0'+c.rank)), func(t *testing.T) {
			gs := localGroups(t, world)
			hooks := make([]*commhook.PowerSGD, world)
			for r := range hooks {
				hooks[r] = newPowerSGD(t, func(o *commhook.PowerSGDOptions) { o.MatrixApproximationRank = c.rank })
			}
			ctx := testCtx(t)
			const iters = 6
			for it := range iters {
				grads := lowRankGrads(world, c.rank, uint64(it))
				outs := make([][][]float64, world)
				onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
					bs := newBuckets(c.dtype, mlpPlan)
					fill(bs, func(b, i int) float64 { return grads[r][b][i] })
					err := iterate(ctx, hooks[r], g, bs)
					for _, b := range bs {
						outs[r] = append(outs[r], values(b))
					}
					return err
				})
				checkLowRankResult(t, it, c.dtype, c.rank, c.tol, grads, outs)
			}
			rate, before, after := hooks[0].CompressionStats()
			wantBefore, wantAfter := 0, 0
			for _, shapes := range mlpPlan {
				for _, s := range shapes {
					n, m := s[0], layer(s).numel()/s[0]
					wantBefore += n * m
					if compressible(s, c.rank) {
						wantAfter += (n + m) * min(n, m, c.rank)
					} else {
						wantAfter += n * m
					}
				}
			}
			wantBefore, wantAfter = (iters-2)*wantBefore, (iters-2)*wantAfter
			if before != wantBefore || after != wantAfter || rate != float64(before)/float64(after) {
				t.Errorf("stats: rate %v, %d before, %d after; want %d and %d", rate, before, after, wantBefore, wantAfter)
			}
		})
	}
}

// compressible is torch's rule for the test's shapes.
func compressible(s layer, rank int) bool {
	if len(s) < 2 {
		return false
	}
	n, m := s[0], s.numel()/s[0]
	r := min(n, m, rank)
	return (n+m)*r*2 < n*m
}

// lowRankGrads: rank k's gradient of every compressible matrix is
// (k+1)·U·Vᵀ, with U and V of rank r the same every iteration, so the
// average is rank r too. The other tensors are noise, new every
// iteration.
func lowRankGrads(world, rank int, seed uint64) [][][]float64 {
	fixed := rand.New(rand.NewPCG(7, 7))
	noise := rand.New(rand.NewPCG(seed, 99))
	out := make([][][]float64, world)
	for r := range out {
		out[r] = make([][]float64, len(mlpPlan))
	}
	for b, shapes := range mlpPlan {
		for _, s := range shapes {
			n, m := s[0], s.numel()/s[0]
			u, v := make([]float64, n*rank), make([]float64, m*rank)
			for i := range u {
				u[i] = fixed.NormFloat64()
			}
			for i := range v {
				v[i] = fixed.NormFloat64()
			}
			for r := range world {
				for i := range n {
					for j := range m {
						var x float64
						for k := range rank {
							x += u[i*rank+k] * v[j*rank+k]
						}
						x *= float64(r + 1)
						if !compressible(s, rank) {
							x = noise.NormFloat64()
						}
						out[r][b] = append(out[r][b], x)
					}
				}
			}
		}
	}
	return out
}

func checkLowRankResult(t *testing.T, it int, d pg.Dtype, rank int, tol float64, grads [][][]float64,
	outs [][][]float64) {
	t.Helper()
	world := len(grads)
	round := func(x float64) float64 {
		if d == pg.Float32 {
			return float64(float32(x))
		}
		return x
	}
	for b, shapes := range mlpPlan {
		off := 0
		for _, s := range shapes {
			n := s.numel()
			compressed := it >= 2 && compressible(s, rank)
			var worst, norm float64
			for i := off; i < off+n; i++ {
				var mean float64
				if it < 2 { // plain Allreduce: divide, then sum
					for r := range world {
						mean = round(mean + round(round(grads[r][b][i])/float64(world)))
					}
				} else { // PowerSGD's uncompressed: sum, then divide
					for r := range world {
						mean = round(mean + round(grads[r][b][i]))
					}
					mean = round(mean / float64(world))
				}
				for r := range world {
					if outs[r][b][i] != outs[0][b][i] {
						t.Fatalf("iteration %d bucket %d element %d: rank %d has %v, rank 0 %v", it, b, i, r, outs[r][b][i],
							outs[0][b][i])
					}
				}
				got := outs[0][b][i]
				if !compressed && it <= 2 && got != mean {
					t.Fatalf("iteration %d: uncompressed %v element %d is %v, want the average %v exactly", it, s, i-off, got, mean)
				}
				worst, norm = max(worst, math.Abs(got-mean)), max(norm, math.Abs(mean))
			}
			if worst > tol*norm {
				t.Errorf("iteration %d: %v reconstructed to %.3g relative, want ≤ %g", it, s, worst/norm, tol)
			}
			off += n
		}
	}
}

// With error feedback, what PowerSGD applies, summed over iterations,
// tracks the sum of the true average gradients: the two differ by the
// ranks' mean error, exactly, and that error stays bounded instead of
// growing with the number of iterations. Without error feedback the gap
// keeps growing.
func TestErrorFeedbackTracksTheTrueSum(t *testing.T) {
	const world, iters = 2, 1000
	plan := [][]layer{{{16, 24}}}
	gapEF, errNorm := runFeedback(t, world, iters, plan, true)
	gapNoEF, _ := runFeedback(t, world, iters, plan, false)
	grad := math.Sqrt(16 * 24) // the norm of one gradient (unit normal entries)
	early, late := maxOf(gapEF[50:300]), maxOf(gapEF[600:])
	t.Logf("gap with error feedback: max %.3g over iterations 50..300, %.3g over 600..1000 (one gradient: %.3g); "+
		"without: %.3g at 300, %.3g at 1000",
		early, late, grad, gapNoEF[299], gapNoEF[iters-1])
	if late > 1.5*early || late > 5*grad {
		t.Errorf("with error feedback the gap grows: %.3g early, %.3g late", early, late)
	}
	if !(gapNoEF[iters-1] > 5*late) {
		t.Errorf("without error feedback the gap should outgrow the bounded one: %.3g vs %.3g", gapNoEF[iters-1], late)
	}
	if errNorm > 1e-9 {
		t.Errorf("sum(applied) + mean(error) differs from sum(true) by %.3g", errNorm)
	}
}

// runFeedback trains nothing: it feeds random gradients for iters
// iterations (compressed from the third) and returns, per iteration, the
// norm of sum(true averages) − sum(applied), and, with error feedback,
// how far sum(applied) + mean over ranks of the error is from sum(true).
func runFeedback(t *testing.T, world, iters int, plan [][]layer, ef bool) ([]float64, float64) {
	gs := localGroups(t, world)
	hooks := make([]*commhook.PowerSGD, world)
	for r := range hooks {
		hooks[r] = newPowerSGD(t, func(o *commhook.PowerSGDOptions) { o.UseErrorFeedback = ef })
	}
	n := layer(plan[0][0]).numel()
	applied, truth := make([]float64, n), make([]float64, n)
	gaps := make([]float64, iters)
	ctx := testCtx(t)
	for it := range iters {
		in := make([][]float64, world)
		onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
			bs := newBuckets(pg.Float64, plan)
			randomGrads(bs, uint64(1000+it), r, 1)
			in[r] = values(bs[0])
			err := iterate(ctx, hooks[r], g, bs)
			if r == 0 {
				add64(applied, values(bs[0]))
			}
			return err
		})
		for r := range world {
			for i, x := range in[r] {
				truth[i] += x / float64(world)
			}
		}
		gaps[it] = dist(truth, applied)
	}
	if !ef {
		return gaps, 0
	}
	withErr := slices.Clone(applied)
	for r := range world {
		e := hooks[r].State()["error/0"]
		for i := range withErr {
			withErr[i] += e[i] / float64(world)
		}
	}
	return gaps, dist(truth, withErr) / norm(truth)
}

func add64(dst, src []float64) {
	for i := range dst {
		dst[i] += src[i]
	}
}

func dist(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += (a[i] - b[i]) * (a[i] - b[i])
	}
	return math.Sqrt(s)
}

func norm(a []float64) float64 { return dist(a, make([]float64, len(a))) }

func maxOf(s []float64) float64 { return slices.Max(s) }

// The state is per rank and per parameter: State and LoadState carry it
// to a fresh hook, which then continues exactly as the original.
func TestPowerSGDStateRoundTrip(t *testing.T) {
	const world = 2
	gs := localGroups(t, world)
	orig := make([]*commhook.PowerSGD, world)
	for r := range orig {
		orig[r] = newPowerSGD(t, func(o *commhook.PowerSGDOptions) { o.MatrixApproximationRank = 2 })
	}
	ctx := testCtx(t)
	step := func(hooks []commhook.Hook, it int) [][]byte {
		out := make([][]byte, world)
		onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
			bs := newBuckets(pg.Float32, mlpPlan)
			randomGrads(bs, uint64(it), r, 1)
			err := iterate(ctx, hooks[r], g, bs)
			for _, b := range bs {
				out[r] = append(out[r], b.Buffer.Data...)
			}
			return err
		})
		return out
	}
	for it := range 4 {
		step([]commhook.Hook{orig[0], orig[1]}, it)
	}
	copies := make([]commhook.Hook, world)
	for r := range copies {
		h := newPowerSGD(t, func(o *commhook.PowerSGDOptions) { o.MatrixApproximationRank = 2 })
		st := orig[r].State()
		if st["iter"][0] != 4 || len(st["error/3"]) != 40*30 || len(st["q/3"]) != 30*2 || len(st["q/4"]) != 0 {
			t.Fatalf("rank %d state: iter %v, %d error values, %d Q values", r, st["iter"], len(st["error/3"]), len(st["q/3"]))
		}
		if err := h.LoadState(st); err != nil {
			t.Fatal(err)
		}
		copies[r] = h
	}
	for it := 4; it < 7; it++ {
		a := step([]commhook.Hook{orig[0], orig[1]}, it)
		b := step(copies, it)
		for r := range a {
			if !slices.Equal(a[r], b[r]) {
				t.Fatalf("iteration %d rank %d: the restored hook differs", it, r)
			}
		}
	}
}

func TestPowerSGDLoadStateRejectsBadState(t *testing.T) {
	h := newPowerSGD(t, nil)
	for name, st := range map[string]map[string][]float64{
		"no iteration":   {"error/1": {1}},
		"bad iteration":  {"iter": {1.5}},
		"unknown entry":  {"iter": {3}, "momentum/1": {1}},
		"empty key":      {"iter": {3}, "q/": {1}},
		"two iterations": {"iter": {1, 2}},
	} {
		if err := h.LoadState(st); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	// A vector of the wrong size fails the bucket that uses it.
	if err := h.LoadState(map[string][]float64{"iter": {5}, "error/0": {1, 2}}); err != nil {
		t.Fatal(err)
	}
	gs := localGroups(t, 1)
	err := iterate(testCtx(t), h, gs[0], newBuckets(pg.Float32, mlpPlan))
	if err == nil || !strings.Contains(err.Error(), `"0" holds 2 values`) {
		t.Errorf("got %v", err)
	}
}

// PowerSGD on a float16 bucket (under Compress) computes in float32 and
// sends P, Q and the uncompressed tensors as float16.
func TestPowerSGDUnderFP16Compress(t *testing.T) {
	const world = 2
	gs := localGroups(t, world)
	var sent []pg.Dtype
	spy := func(g pg.ProcessGroup) pg.ProcessGroup { return &dtypeSpy{ProcessGroup: g, seen: &sent} }
	hooks := make([]commhook.Hook, world)
	for r := range hooks {
		hooks[r] = commhook.Compress(pg.Float16, newPowerSGD(t, nil))
	}
	ctx := testCtx(t)
	for it := range 4 {
		grads := lowRankGrads(world, 1, uint64(it))
		outs := make([][][]float64, world)
		onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
			if r == 0 {
				g = spy(g)
			}
			bs := newBuckets(pg.Float32, mlpPlan)
			fill(bs, func(b, i int) float64 { return grads[r][b][i] })
			err := iterate(ctx, hooks[r], g, bs)
			for _, b := range bs {
				outs[r] = append(outs[r], values(b))
			}
			return err
		})
		if it >= 2 {
			for b := range outs[0] {
				for i, x := range outs[0][b] {
					mean := (grads[0][b][i] + grads[1][b][i]) / 2
					if math.Abs(x-mean) > 0.02*(1+math.Abs(mean)) {
						t.Fatalf("iteration %d bucket %d element %d: %v, want about %v", it, b, i, x, mean)
					}
				}
			}
		}
	}
	for _, d := range sent {
		if d != pg.Float16 {
			t.Fatalf("sent %v", sent)
		}
	}
	if len(sent) != 2*3+2*3*3 { // 2 plain iterations of 3 buckets, then 2 of U, P, Q per bucket
		t.Errorf("%d collectives: %v", len(sent), sent)
	}
	if got := commhook.Name(hooks[0]); got != "fp16_compress_wrapper(powersgd)" {
		t.Errorf("name %q", got)
	}
	if st := hooks[0].(commhook.Stateful).State(); st["iter"][0] != 4 {
		t.Errorf("the wrapper's state is not PowerSGD's: %v", st["iter"])
	}
}

// dtypeSpy records the dtype of every allreduce.
type dtypeSpy struct {
	pg.ProcessGroup
	seen *[]pg.Dtype
}

// Inner is the watched group, for pg.As.
func (s *dtypeSpy) Inner() pg.ProcessGroup { return s.ProcessGroup }

func (s *dtypeSpy) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	*s.seen = append(*s.seen, t.Dtype)
	return s.ProcessGroup.AllReduce(ctx, t, op)
}
