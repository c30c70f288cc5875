package commhook_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/averaging"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/reducer"
)

// TestPostLocalSGDSwitchesToTheSubgroup: 4 ranks on 2 simulated hosts of
// 2, StartLocalSGDIter 2. Iterations 0 and 1 average each bucket over all
// 4 ranks; from iteration 2 over the host's 2 ranks only, and with
// NoPostLocalGradientAllreduce not at all. The iteration count is state.
func TestPostLocalSGDSwitchesToTheSubgroup(t *testing.T) {
	for _, noPost := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoPostLocalGradientAllreduce=%v", noPost), func(t *testing.T) {
			gs := testworld.Groups(t, "tcp", 4)
			hooks := make([]*commhook.PostLocalSGD, 4)
			testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) (err error) {
				hooks[r], err = commhook.NewPostLocalSGD(testworld.Ctx(t), g, commhook.PostLocalSGDOptions{
					StartLocalSGDIter: 2, RanksPerHost: 2, NoPostLocalGradientAllreduce: noPost})
				return err
			}))
			defer func() {
				for _, h := range hooks {
					h.Close()
				}
			}()
			for it := range 4 {
				got := make([][]float64, 4)
				testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
					// two buckets; the second is the iteration's last
					var works []pg.Work
					for b := range 2 {
						buf := []float64{float64(r*10 + b + it)}
						got[r] = append(got[r], 0)
						bucket := &commhook.GradBucket{Index: b, Buffer: pg.Float64s(buf), IsLast: b == 1}
						works = append(works, hooks[r].Run(testworld.Ctx(t), g, bucket))
						defer func(b int) { got[r][b] = buf[0] }(b)
					}
					for _, w := range works {
						if err := w.Wait(testworld.Ctx(t)); err != nil {
							return err
						}
					}
					return nil
				}))
				for r := range 4 {
					for b := range 2 {
						var want float64
						switch {
						case it < 2: // mean of r*10+b+it over all ranks
							want = float64(0+10+20+30)/4 + float64(b+it)
						case noPost:
							want = float64(r*10 + b + it)
						default: // mean over the host's two ranks
							host := r / 2
							want = float64(host*20*2+10)/2 + float64(b+it)
						}
						if got[r][b] != want {
							t.Fatalf("iteration %d rank %d bucket %d: %v, want %v", it, r, b, got[r][b], want)
						}
					}
				}
			}
			if hooks[0].Iter() != 2 {
				t.Fatalf("counted %d iterations, want 2 (counting stops at the switch, as torch's)", hooks[0].Iter())
			}
			st := hooks[0].State()
			if err := hooks[1].LoadState(st); err != nil || hooks[1].Iter() != 2 {
				t.Fatalf("LoadState(%v): %v, iter %d", st, err, hooks[1].Iter())
			}
			if err := hooks[1].LoadState(map[string][]float64{"iter": {-1}}); err == nil {
				t.Fatal("a negative iteration count was loaded")
			}
		})
	}
}

// TestPostLocalSGDTraining trains a model of two parameters on 4 ranks (2
// simulated hosts of 2) through the reducer, with the post-local SGD hook
// (StartLocalSGDIter 3) and a PeriodicModelAverager (WarmupSteps 3,
// Period 2), SGD done by hand, each rank on its own data. Before the
// switch every rank holds the same parameters after every step; after it
// the hosts drift apart between averagings, the two ranks of a host stay
// together, and every averaging step brings all four back to one value.
func TestPostLocalSGDTraining(t *testing.T) {
	const ranks, steps, lr = 4, 10, 0.1
	gs := testworld.Groups(t, "tcp", ranks)
	params := []reducer.Param{{Name: "w", Shape: []int{3}, Dtype: pg.Float64},
		{Name: "b", Shape: []int{1}, Dtype: pg.Float64}}
	values := make([][][]float64, ranks) // [rank][param][elem]
	hosts := func(r int) int { return r / 2 }
	history := make([][][][]float64, steps) // [step][rank] snapshot
	for s := range history {
		history[s] = make([][][]float64, ranks)
	}
	testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
		ctx := testworld.Ctx(t)
		hook, err := commhook.NewPostLocalSGD(ctx, g, commhook.PostLocalSGDOptions{StartLocalSGDIter: 3, RanksPerHost: 2})
		if err != nil {
			return err
		}
		defer hook.Close()
		red, err := reducer.New(ctx, g, params, reducer.Options{Hook: hook})
		if err != nil {
			return err
		}
		avg, err := averaging.NewPeriodicModelAverager(g, averaging.PeriodicOptions{Period: 2, WarmupSteps: 3})
		if err != nil {
			return err
		}
		w, b := []float64{0.5, -0.25, 1}, []float64{0}
		values[r] = [][]float64{w, b}
		for s := range steps {
			// gradient of this rank's own loss, different on every rank
			gw := []float64{w[0] - float64(r), w[1] + float64(hosts(r)), w[2] * float64(r+1)}
			gb := []float64{b[0] - float64(s%3) - float64(r)}
			if err := red.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
				return err
			}
			if err := red.MarkReady(1, pg.Float64s(gb)); err != nil {
				return err
			}
			if err := red.MarkReady(0, pg.Float64s(gw)); err != nil {
				return err
			}
			if err := red.Finalize(ctx); err != nil {
				return err
			}
			for i := range w {
				w[i] -= lr * gw[i]
			}
			b[0] -= lr * gb[0]
			if _, err := avg.AverageParameters(ctx, []pg.Tensor{pg.Float64s(w), pg.Float64s(b)}); err != nil {
				return err
			}
			history[s][r] = [][]float64{append([]float64(nil), w...), append([]float64(nil), b...)}
		}
		return nil
	}))
	equal := func(a, b [][]float64) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
	for s := range steps {
		averaged := s >= 3 && (s-3)%2 == 0
		for r := 1; r < ranks; r++ {
			all := equal(history[s][r], history[s][0])
			switch {
			case s < 3 || averaged:
				if !all {
					t.Fatalf("step %d: rank %d holds %v, rank 0 %v; want one value on every rank", s, r, history[s][r], history[s][0])
				}
			case hosts(r) == 0:
				if !all {
					t.Fatalf("step %d: rank %d, on rank 0's host, holds %v, rank 0 %v", s, r, history[s][r], history[s][0])
				}
			default:
				if all {
					t.Fatalf("step %d: rank %d on the other host holds rank 0's %v: local SGD did not start", s, r, history[s][0])
				}
				if !equal(history[s][r], history[s][2]) {
					t.Fatalf("step %d: ranks 2 and 3 share a host but hold %v and %v", s, history[s][2], history[s][r])
				}
			}
		}
	}
}

func TestPostLocalSGDRefuses(t *testing.T) {
	g := testworld.Local(t, 1)[0]
	if _, err := commhook.NewPostLocalSGD(context.Background(), g,
		commhook.PostLocalSGDOptions{StartLocalSGDIter: -1}); err == nil {
		t.Fatal("negative StartLocalSGDIter accepted")
	}
}
