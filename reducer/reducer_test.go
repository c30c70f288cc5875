package reducer

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// grads makes rank r's gradient for every parameter: distinct per rank.
func grads(ps []Param, rank, iter int) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = make([]float64, p.Numel())
		for j := range out[i] {
			out[i][j] = float64((rank+1)*(j+1)) + 0.25*float64(i) + float64(iter)/8
		}
	}
	return out
}

// average is the naive reference: the mean of every rank's gradient.
func average(ps []Param, n, iter int) [][]float64 {
	out := make([][]float64, len(ps))
	for r := range n {
		for i, g := range grads(ps, r, iter) {
			if out[i] == nil {
				out[i] = make([]float64, len(g))
			}
			for j, v := range g {
				out[i][j] += v / float64(n)
			}
		}
	}
	return out
}

func closeTo(a, b []float64, tol float64) bool {
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol*(1+math.Abs(b[i])) {
			return false
		}
	}
	return len(a) == len(b)
}

// Metamorphic: random world sizes, bucket caps and per-rank ready orders
// all give the naive average, for several iterations (so through the
// rebuild), and every rank ends bitwise equal.
func TestReducerAveragesForRandomOrdersAndCaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 12 {
		n := 1 + rng.IntN(4)
		ps := mlpParams(1+rng.IntN(20), 1+rng.IntN(20), 1+rng.IntN(10))
		opts := Options{BucketCapBytes: 8 * (1 + rng.IntN(400)), FirstBucketBytes: 8 * (1 + rng.IntN(100)),
			FindUnusedParameters: rng.IntN(3) == 0}
		orders := make([][][]int, n) // rank -> iteration -> order
		for r := range orders {
			for range 3 {
				orders[r] = append(orders[r], rng.Perm(len(ps)))
			}
		}
		gs := world(t, n)
		results := make([][][]float64, n)
		errs := onRanks(gs, func(rank int, g pg.ProcessGroup) error {
			ctx := testCtx(t)
			red, err := New(ctx, g, ps, opts)
			if err != nil {
				return err
			}
			for iter, order := range orders[rank] {
				gr := grads(ps, rank, iter)
				if err := red.Prepare(ctx, Iteration{Sync: true}); err != nil {
					return err
				}
				for _, i := range order {
					if err := red.MarkReady(i, pg.Float64s(gr[i])); err != nil {
						return err
					}
				}
				if err := red.Finalize(ctx); err != nil {
					return err
				}
				results[rank] = gr
				want := average(ps, n, iter)
				for i := range ps {
					if !closeTo(gr[i], want[i], 1e-12) {
						t.Errorf("trial %d rank %d iter %d param %d: got %v want %v", trial, rank, iter, i, gr[i][:min(3, len(gr[i]))],
							want[i][:min(3, len(want[i]))])
					}
				}
			}
			return nil
		})
		noErrors(t, errs)
		for r := 1; r < n; r++ {
			for i := range ps {
				if !slices.Equal(results[r][i], results[0][i]) {
					t.Fatalf("trial %d: rank %d's result for param %d differs bitwise from rank 0's", trial, r, i)
				}
			}
		}
	}
}

// DDP's first plan is one bucket (buckets will be rebuilt); after the
// first iteration they are rebuilt in rank 0's ready order, on every rank,
// even when other ranks saw another order.
func TestReducerRebuildUsesRankZeroOrder(t *testing.T) {
	ps := mlpParams(64, 32, 16, 4) // 6 params
	opts := Options{FirstBucketBytes: 2048, BucketCapBytes: 8192}
	gs := world(t, 2)
	plans := make([][][]int, 2)
	errs := onRanks(gs, func(rank int, g pg.ProcessGroup) error {
		ctx := testCtx(t)
		red, err := New(ctx, g, ps, opts)
		if err != nil {
			return err
		}
		if got := red.Buckets(); len(got) != 1 {
			t.Errorf("rank %d: first plan has %d buckets, want one (DDP disables bucketing before the rebuild)", rank, len(got))
		}
		orders := [][]int{{4, 5, 2, 3, 0, 1}, {0, 1, 2, 3, 4, 5}}
		for iter := range 2 {
			gr := grads(ps, rank, iter)
			if err := red.Prepare(ctx, Iteration{Sync: true}); err != nil {
				return err
			}
			for _, i := range orders[rank] {
				if err := red.MarkReady(i, pg.Float64s(gr[i])); err != nil {
					return err
				}
			}
			if err := red.Finalize(ctx); err != nil {
				return err
			}
		}
		plans[rank] = red.Buckets()
		return nil
	})
	noErrors(t, errs)
	// Rank 0's order: fc3.weight (16*4*8 = 512 B) + fc3.bias (32) +
	// fc2.weight (32*16*8 = 4096) reaches 2048 and closes bucket 0; then
	// fc2.bias (128) + fc1.weight (64*32*8 = 16384) reaches 8192; fc1.bias is left.
	want := [][]int{{4, 5, 2}, {3, 0}, {1}}
	for r, p := range plans {
		if !slices.EqualFunc(p, want, slices.Equal[[]int]) {
			t.Errorf("rank %d: rebuilt plan %v, want %v", r, p, want)
		}
	}
}

func TestReducerErrors(t *testing.T) {
	ps := mlpParams(3, 2)
	gs := world(t, 1)
	ctx := testCtx(t)

	t.Run("missing gradient names the parameter", func(t *testing.T) {
		red, err := New(ctx, gs[0], ps, Options{})
		if err != nil {
			t.Fatal(err)
		}
		gr := grads(ps, 0, 0)
		red.Prepare(ctx, Iteration{Sync: true})
		red.MarkReady(0, pg.Float64s(gr[0]))
		err = red.Finalize(ctx)
		if !errors.Is(err, ErrUnfinishedReduction) || !strings.Contains(err.Error(), "fc1.bias") ||
			!strings.Contains(err.Error(), "FindUnusedParameters") {
			t.Fatalf("got %v", err)
		}
		if err2 := red.Prepare(ctx, Iteration{Sync: true}); !errors.Is(err2, ErrUnfinishedReduction) {
			t.Fatalf("after a fatal error Prepare returned %v", err2)
		}
	})
	t.Run("new iteration before the previous finished", func(t *testing.T) {
		red, _ := New(ctx, gs[0], ps, Options{})
		gr := grads(ps, 0, 0)
		red.Prepare(ctx, Iteration{Sync: true})
		red.MarkReady(1, pg.Float64s(gr[1]))
		err := red.Prepare(ctx, Iteration{Sync: true})
		if !errors.Is(err, ErrUnfinishedReduction) || !strings.Contains(err.Error(), "fc1.weight") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("marked twice names the parameter", func(t *testing.T) {
		red, _ := New(ctx, gs[0], ps, Options{})
		gr := grads(ps, 0, 0)
		red.Prepare(ctx, Iteration{Sync: true})
		red.MarkReady(1, pg.Float64s(gr[1]))
		err := red.MarkReady(1, pg.Float64s(gr[1]))
		if !errors.Is(err, ErrMarkedTwice) || !strings.Contains(err.Error(), "index 1 with name fc1.bias") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("wrong dtype and size", func(t *testing.T) {
		red, _ := New(ctx, gs[0], ps, Options{})
		red.Prepare(ctx, Iteration{Sync: true})
		if err := red.MarkReady(0, pg.Float32s(make([]float32, 6))); !errors.Is(err, ErrBadGradient) ||
			!strings.Contains(err.Error(), "fc1.weight") {
			t.Fatalf("float32 gradient for a float64 param: %v", err)
		}
		if err := red.MarkReady(0, pg.Float64s(make([]float64, 5))); !errors.Is(err, ErrBadGradient) {
			t.Fatalf("short gradient: %v", err)
		}
	})
	t.Run("hook registration", func(t *testing.T) {
		red, _ := New(ctx, gs[0], ps, Options{})
		if err := red.RegisterCommHook(nil); !errors.Is(err, ErrHookRegistration) {
			t.Fatalf("nil hook: %v", err)
		}
		red.Prepare(ctx, Iteration{Sync: false})
		if err := red.RegisterCommHook(noHook{}); !errors.Is(err, ErrHookRegistration) {
			t.Fatalf("hook after training started: %v", err)
		}
	})
	t.Run("unused given without FindUnusedParameters", func(t *testing.T) {
		red, _ := New(ctx, gs[0], ps, Options{})
		if err := red.Prepare(ctx, Iteration{Sync: true, Unused: []int{1}}); err == nil ||
			!strings.Contains(err.Error(), "FindUnusedParameters") {
			t.Fatalf("got %v", err)
		}
	})
}

// A model that differs across ranks fails on every rank, naming the rank
// and the parameter.
func TestReducerModelMismatch(t *testing.T) {
	gs := world(t, 3)
	t.Run("shape", func(t *testing.T) {
		errs := onRanks(gs, func(rank int, g pg.ProcessGroup) error {
			ps := mlpParams(4, 3, 2)
			if rank == 2 {
				ps[2].Shape = []int{3, 5}
			}
			_, err := New(testCtx(t), g, ps, Options{})
			return err
		})
		for r, err := range errs {
			if !errors.Is(err, ErrModelMismatch) || !strings.Contains(err.Error(), "rank 2") ||
				!strings.Contains(err.Error(), "fc2.weight") {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
	t.Run("count", func(t *testing.T) {
		errs := onRanks(gs, func(rank int, g pg.ProcessGroup) error {
			ps := mlpParams(4, 3, 2)
			if rank == 1 {
				ps = ps[:3]
			}
			_, err := New(testCtx(t), g, ps, Options{})
			return err
		})
		for r, err := range errs {
			if !errors.Is(err, ErrModelMismatch) || !strings.Contains(err.Error(), "rank 1 has 3 parameters") {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
}
