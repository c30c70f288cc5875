package reducer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/goddp/ddp/pg"
)

// joinGrad is rank r's gradient of parameter i at its step t, given the
// current values w: it depends on both, so a rank that steps on the wrong
// average drifts.
func joinGrad(r, t, i int, w []float64) []float64 {
	g := make([]float64, len(w))
	for k := range w {
		g[k] = 0.5*w[k] + math.Sin(float64(100*r+10*t+3*i+k))
	}
	return g
}

var joinParams = []Param{
	{Name: "fc.weight", Shape: []int{3, 2}, Dtype: pg.Float64},
	{Name: "fc.bias", Shape: []int{2}, Dtype: pg.Float64},
}

func joinInit() [][]float64 { return [][]float64{{0.1, -0.2, 0.3, 0.4, -0.5, 0.6}, {0.05, -0.05}} }

const joinLR = 0.1

// joinReference is what torch's Join gives: at iteration t every rank
// with more than t batches contributes its gradient, the sum is divided
// by the world size (or the number of those ranks), every training rank
// applies it, and at the end all ranks take the last joiner's values.
func joinReference(batches []int, byActive bool) [][]float64 {
	return joinReferenceWith(batches, byActive, joinGrad)
}

// joinReferenceWith is joinReference with the gradients of grad, where
// nil is a parameter the rank's graph does not reach (it contributes
// zeros); an iteration whose average is not finite is not stepped.
func joinReferenceWith(batches []int, byActive bool, grad func(r, t, i int, w []float64) []float64) [][]float64 {
	w := joinInit()
	most := 0
	for _, b := range batches {
		most = max(most, b)
	}
	for t := range most {
		var active []int
		for r, b := range batches {
			if b > t {
				active = append(active, r)
			}
		}
		div := float64(len(batches))
		if byActive {
			div = float64(len(active))
		}
		avg := make([][]float64, len(w))
		finite := true
		for i := range w {
			avg[i] = make([]float64, len(w[i]))
			for _, r := range active {
				for k, g := range grad(r, t, i, w[i]) {
					avg[i][k] += g / div
					finite = finite && !math.IsNaN(avg[i][k])
				}
			}
		}
		for i := range w {
			for k := range w[i] {
				if finite {
					w[i][k] -= joinLR * avg[i][k]
				}
			}
		}
	}
	return w
}

// trainJoined runs rank r of a Join with batches[r] batches and returns
// its final values.
func trainJoined(ctx context.Context, g pg.ProcessGroup, batches []int, opts Options, jo JoinOptions) ([][]float64,
	error) {
	return trainJoinedWith(ctx, g, batches, opts, jo, joinGrad)
}

// trainJoinedWith is trainJoined with the gradients of grad: a nil one
// is not marked ready (the rank's graph does not reach the parameter),
// and an iteration that ends in a NonFiniteError is not stepped.
func trainJoinedWith(ctx context.Context, g pg.ProcessGroup, batches []int, opts Options, jo JoinOptions,
	grad func(r, t, i int, w []float64) []float64) ([][]float64, error) {
	r, err := New(ctx, g, joinParams, opts)
	if err != nil {
		return nil, err
	}
	w := joinInit()
	values := []pg.Tensor{pg.Float64s(w[0]), pg.Float64s(w[1])}
	j, err := NewJoin(r, values, jo)
	if err != nil {
		return nil, err
	}
	for t := range batches[g.Rank()] {
		if err := j.Step(ctx, true); err != nil {
			return w, err
		}
		if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
			return w, err
		}
		grads := [][]float64{grad(g.Rank(), t, 0, w[0]), grad(g.Rank(), t, 1, w[1])}
		for i := len(grads) - 1; i >= 0; i-- {
			if grads[i] == nil {
				continue
			}
			if err := r.MarkReady(i, pg.Float64s(grads[i])); err != nil {
				return w, err
			}
		}
		if err := r.Finalize(ctx); errors.Is(err, ErrNonFinite) {
			continue
		} else if err != nil {
			return w, err
		}
		for i, gr := range grads {
			if gr == nil { // the result for a parameter this rank's graph does not reach
				grads[i] = append([]float64(nil), pg.View[float64](r.Gradient(i))...)
			}
		}
		for i := range w {
			for k := range w[i] {
				w[i][k] -= joinLR * grads[i][k]
			}
		}
	}
	return w, j.Finish(ctx)
}

func TestJoinUnevenInputs(t *testing.T) {
	for _, backend := range []string{"local", "tcp"} {
		for _, c := range []struct {
			batches  []int
			byActive bool
			opts     Options
		}{
			{[]int{3, 5, 8}, false, Options{}},
			{[]int{3, 5, 8}, true, Options{}},
			{[]int{8, 3, 5}, false, Options{BucketCapBytes: 16, FirstBucketBytes: 16}}, // one bucket per parameter
			{[]int{1, 4}, false, Options{BucketCapBytes: 16, FirstBucketBytes: 16}},    // rank 0 joins before the rebuild
			{[]int{0, 2, 2}, false, Options{FindUnusedParameters: true}},
			{[]int{4, 4}, false, Options{}},
		} {
			name := fmt.Sprintf("%s/batches=%v/byActive=%v/cap=%d/unused=%v", backend, c.batches, c.byActive,
				c.opts.BucketCapBytes, c.opts.FindUnusedParameters)
			t.Run(name, func(t *testing.T) {
				gs := groupsOf(t, backend, len(c.batches))
				got := make([][][]float64, len(gs))
				noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) (err error) {
					got[rank], err = trainJoined(testCtx(t), g, c.batches, c.opts, JoinOptions{DivideByActiveRanks: c.byActive})
					return err
				}))
				want := joinReference(c.batches, c.byActive)
				for rank := range got {
					for i := range want {
						for k := range want[i] {
							if d := math.Abs(got[rank][i][k] - want[i][k]); d > 1e-12 {
								t.Fatalf("rank %d parameter %d[%d]: %v, want %v (torch's Join rule)", rank, i, k, got[rank][i][k], want[i][k])
							}
						}
					}
					if fmt.Sprint(got[rank]) != fmt.Sprint(got[0]) {
						t.Fatalf("rank %d ended with %v, rank 0 with %v: the final model was not synced", rank, got[rank], got[0])
					}
				}
			})
		}
	}
}

// TestJoinThrowOnEarlyTermination: the rank with 2 batches runs out, and
// every rank returns ErrEarlyTermination at its next step, without
// hanging; ranks that run out together finish normally.
func TestJoinThrowOnEarlyTermination(t *testing.T) {
	gs := groupsOf(t, "tcp", 3)
	errs := onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		_, err := trainJoined(testCtx(t), g, []int{2, 4, 6}, Options{}, JoinOptions{ThrowOnEarlyTermination: true})
		return err
	})
	for rank, err := range errs {
		if !errors.Is(err, ErrEarlyTermination) {
			t.Fatalf("rank %d: %v, want ErrEarlyTermination", rank, err)
		}
	}
	gs = groupsOf(t, "local", 2)
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		_, err := trainJoined(testCtx(t), g, []int{3, 3}, Options{}, JoinOptions{ThrowOnEarlyTermination: true})
		return err
	}))
}

// TestJoinStaticGraphUnusedOnJoinedRank: under StaticGraph, rank 1's
// graph never reaches fc.bias, and rank 1 runs out of inputs first. Its
// shadow iterations must mark ready what its own iterations did, the
// static unused set aside (Prepare marks that). Before the fix every
// shadow iteration failed with ErrGraphChanged, and rank 0 waited for it
// until the group timeout.
func TestJoinStaticGraphUnusedOnJoinedRank(t *testing.T) {
	grad := func(r, t, i int, w []float64) []float64 {
		if r == 1 && i == 1 {
			return nil
		}
		return joinGrad(r, t, i, w)
	}
	for _, batches := range [][]int{{3, 1}, {3, 0}, {4, 2}} {
		t.Run(fmt.Sprint(batches), func(t *testing.T) {
			gs := groupsOf(t, "local", len(batches))
			got := make([][][]float64, len(gs))
			noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) (err error) {
				got[rank], err = trainJoinedWith(testCtx(t), g, batches, Options{StaticGraph: true}, JoinOptions{}, grad)
				return err
			}))
			checkJoined(t, got, joinReferenceWith(batches, false, grad))
		})
	}
}

// TestJoinNonFiniteWhileJoined: with CheckFinite, rank 0's first average
// is not finite while rank 1 has already joined. Both ranks see the
// NonFiniteError, which leaves the iteration complete: rank 0 skips that
// step and trains on, and rank 1's shadowing must go on too. Before the
// fix rank 1's Finish failed with it, and rank 0 waited for rank 1 until
// the group timeout.
func TestJoinNonFiniteWhileJoined(t *testing.T) {
	grad := func(r, t, i int, w []float64) []float64 {
		g := joinGrad(r, t, i, w)
		if r == 0 && t == 0 && i == 0 {
			g[1] = math.NaN()
		}
		return g
	}
	batches := []int{3, 0}
	gs := groupsOf(t, "local", len(batches))
	got := make([][][]float64, len(gs))
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) (err error) {
		got[rank], err = trainJoinedWith(testCtx(t), g, batches, Options{CheckFinite: true}, JoinOptions{}, grad)
		return err
	}))
	checkJoined(t, got, joinReferenceWith(batches, false, grad))
}

// checkJoined checks every rank's final values against want, torch's
// rule, and against rank 0's.
func checkJoined(t *testing.T, got [][][]float64, want [][]float64) {
	t.Helper()
	for rank := range got {
		for i := range want {
			for k := range want[i] {
				if d := math.Abs(got[rank][i][k] - want[i][k]); !(d <= 1e-12) {
					t.Fatalf("rank %d parameter %d[%d]: %v, want %v (torch's Join rule)", rank, i, k, got[rank][i][k], want[i][k])
				}
			}
		}
		if fmt.Sprint(got[rank]) != fmt.Sprint(got[0]) {
			t.Fatalf("rank %d ended with %v, rank 0 with %v: the final model was not synced", rank, got[rank], got[0])
		}
	}
}
