package reducer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/goddp/ddp/pg"
)

// shadowLog records, per iteration, the averages the training ranks
// stepped with and the gradients each joined rank's OnShadowStep got.
type shadowLog struct {
	mu     sync.Mutex
	avg    map[int][][]float64         // iteration: a training rank's averages (every training rank's are equal)
	calls  map[int]map[int][][]float64 // rank: iteration: OnShadowStep's gradients
	params map[int]bool                // rank: every call got the Join's values
	last   map[int][][]float64         // rank: its values after its last OnShadowStep
}

func newShadowLog() *shadowLog {
	return &shadowLog{avg: map[int][][]float64{}, calls: map[int]map[int][][]float64{}, params: map[int]bool{},
		last: map[int][][]float64{}}
}

func (l *shadowLog) trained(t int, grads [][]float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.avg[t]; !ok {
		l.avg[t] = grads
	}
}

func (l *shadowLog) shadowed(rank, t int, grads, after [][]float64, sameParams bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls[rank] == nil {
		l.calls[rank] = map[int][][]float64{}
	}
	l.calls[rank][t] = grads
	l.params[rank] = (len(l.calls[rank]) == 1 || l.params[rank]) && sameParams
	l.last[rank] = after
}

// shadowCase is one run of TestJoinOnShadowStep.
type shadowCase struct {
	name    string
	backend string
	batches []int
	opts    Options
	grad    func(r, t, i int, w []float64) []float64
	noSync  map[int]bool // iterations every training rank runs without synchronising
	skip    int          // the iteration whose average is not finite (-1: none)
}

// trainShadowed is trainJoinedWith with an OnShadowStep that records its
// calls and steps the joined rank's values with the averages, as the
// training ranks do.
func trainShadowed(ctx context.Context, g pg.ProcessGroup, c shadowCase, log *shadowLog) ([][]float64, error) {
	r, err := New(ctx, g, joinParams, c.opts)
	if err != nil {
		return nil, err
	}
	w := joinInit()
	values := []pg.Tensor{pg.Float64s(w[0]), pg.Float64s(w[1])}
	next := c.batches[g.Rank()] // the iteration the next call is for: the test knows which ones have none
	step := func(_ context.Context, params, grads []pg.Tensor) error {
		for c.noSync[next] || next == c.skip {
			next++
		}
		got := [][]float64{slices.Clone(pg.View[float64](grads[0])), slices.Clone(pg.View[float64](grads[1]))}
		same := &pg.View[float64](params[0])[0] == &w[0][0] && &pg.View[float64](params[1])[0] == &w[1][0]
		for i := range w {
			for k := range w[i] {
				w[i][k] -= joinLR * got[i][k]
			}
		}
		log.shadowed(g.Rank(), next, got, [][]float64{slices.Clone(w[0]), slices.Clone(w[1])}, same)
		next++
		return nil
	}
	j, err := NewJoin(r, values, JoinOptions{OnShadowStep: step})
	if err != nil {
		return nil, err
	}
	for t := range c.batches[g.Rank()] {
		sync := !c.noSync[t]
		if err := j.Step(ctx, sync); err != nil {
			return w, err
		}
		if err := r.Prepare(ctx, Iteration{Sync: sync}); err != nil {
			return w, err
		}
		grads := [][]float64{c.grad(g.Rank(), t, 0, w[0]), c.grad(g.Rank(), t, 1, w[1])}
		for i := len(grads) - 1; i >= 0; i-- {
			if err := r.MarkReady(i, pg.Float64s(grads[i])); err != nil {
				return w, err
			}
		}
		if err := r.Finalize(ctx); errors.Is(err, ErrNonFinite) || !sync {
			continue
		} else if err != nil {
			return w, err
		}
		log.trained(t, grads)
		for i := range w {
			for k := range w[i] {
				w[i][k] -= joinLR * grads[i][k]
			}
		}
	}
	return w, j.Finish(ctx)
}

// TestJoinOnShadowStep: a joined rank's OnShadowStep runs once for every
// iteration it shadows, after the iteration, with the Join's values and
// bitwise the averages the training ranks stepped with, so a joined rank
// that steps in it ends bitwise where the last joiner does, before the
// final sync. It is not called for an iteration no rank synchronises
// (no_sync), nor for one whose averages are not finite (the training
// ranks skip it).
func TestJoinOnShadowStep(t *testing.T) {
	nan := func(r, t, i int, w []float64) []float64 {
		g := joinGrad(r, t, i, w)
		if r == 2 && t == 4 && i == 1 {
			g[0] = math.NaN()
		}
		return g
	}
	for _, c := range []shadowCase{
		{"tcp", "tcp", []int{2, 6, 4}, Options{}, joinGrad, nil, -1},
		{"local/one-bucket-per-parameter", "local", []int{0, 5, 3}, Options{BucketCapBytes: 16, FirstBucketBytes: 16},
			joinGrad, nil, -1},
		{"local/no-sync", "local", []int{2, 6, 4}, Options{}, joinGrad, map[int]bool{4: true}, -1},
		{"local/non-finite", "local", []int{2, 6, 5}, Options{CheckFinite: true}, nan, nil, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := newShadowLog()
			gs := groupsOf(t, c.backend, len(c.batches))
			got := make([][][]float64, len(gs))
			noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) (err error) {
				got[rank], err = trainShadowed(testCtx(t), g, c, log)
				return err
			}))
			most := slices.Max(c.batches)
			for rank, b := range c.batches {
				var want []int
				for it := b; it < most; it++ {
					if !c.noSync[it] && it != c.skip {
						want = append(want, it)
					}
				}
				var calls []int
				for it, grads := range log.calls[rank] {
					calls = append(calls, it)
					if fmt.Sprint(grads) != fmt.Sprint(log.avg[it]) {
						t.Errorf("rank %d, iteration %d: OnShadowStep got %v, the training ranks stepped with %v", rank, it,
							grads, log.avg[it])
					}
				}
				slices.Sort(calls)
				if !slices.Equal(calls, want) {
					t.Errorf("rank %d (%d batches): OnShadowStep ran for iterations %v, want %v", rank, b, calls, want)
				}
				if len(calls) > 0 && !log.params[rank] {
					t.Errorf("rank %d: OnShadowStep's params are not the Join's values", rank)
				}
				if len(calls) > 0 && fmt.Sprint(log.last[rank]) != fmt.Sprint(got[rank]) {
					t.Errorf("rank %d stepped in OnShadowStep to %v, but the last joiner ended at %v", rank, log.last[rank],
						got[rank])
				}
				if fmt.Sprint(got[rank]) != fmt.Sprint(got[0]) {
					t.Errorf("rank %d ended with %v, rank 0 with %v", rank, got[rank], got[0])
				}
			}
		})
	}
}

// TestJoinOnShadowStepError: an error from OnShadowStep ends Finish with
// it; the training rank then fails (the joined rank's group is aborted)
// instead of waiting.
func TestJoinOnShadowStepError(t *testing.T) {
	boom := errors.New("boom")
	gs := world(t, 2)
	errs := onRanks(gs, func(rank int, g pg.ProcessGroup) error {
		ctx := testCtx(t)
		r, err := New(ctx, g, joinParams, Options{})
		if err != nil {
			return err
		}
		w := joinInit()
		j, err := NewJoin(r, []pg.Tensor{pg.Float64s(w[0]), pg.Float64s(w[1])}, JoinOptions{
			OnShadowStep: func(context.Context, []pg.Tensor, []pg.Tensor) error { return boom }})
		if err != nil {
			return err
		}
		for range 1 + 2*rank {
			if err := j.Step(ctx, true); err != nil {
				return err
			}
			if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
				return err
			}
			for i := len(w) - 1; i >= 0; i-- {
				if err := r.MarkReady(i, pg.Float64s(joinGrad(rank, 0, i, w[i]))); err != nil {
					return err
				}
			}
			if err := r.Finalize(ctx); err != nil {
				return err
			}
		}
		err = j.Finish(ctx)
		if err != nil {
			gs[rank].Abort(err)
		}
		return err
	})
	if !errors.Is(errs[0], boom) {
		t.Errorf("rank 0 (joined first): %v, want OnShadowStep's error", errs[0])
	}
	if errs[1] == nil {
		t.Error("rank 1 (training) ended without an error though rank 0 failed")
	}
}
