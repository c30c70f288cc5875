package averaging_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/goddp/ddp/averaging"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
)

// rankParams are rank r's parameters at step s: a float32 and a float64
// tensor of odd lengths, values that differ by rank and step.
func rankParams(r, s int) []pg.Tensor {
	a := make([]float32, 5)
	b := make([]float64, 3)
	for i := range a {
		a[i] = float32(r*10+s) + float32(i)/8
	}
	for i := range b {
		b[i] = float64(r*r) - float64(s*i)/3
	}
	return []pg.Tensor{pg.Float32s(a), pg.Float64s(b)}
}

// mean is what torch's average_parameters gives: the parameters of ranks
// in float64 (torch.cat promotes float32 with float64), each divided by
// the group size, summed, then cast back to each parameter's dtype.
func mean(ranks []int, s int) []pg.Tensor {
	n := float64(len(ranks))
	out := rankParams(0, s)
	for k, t := range out {
		for i := range t.Len() {
			sum := 0.0
			for _, r := range ranks {
				sum += value(rankParams(r, s)[k], i) / n
			}
			set(t, i, sum)
		}
	}
	return out
}

func value(t pg.Tensor, i int) float64 {
	if t.Dtype == pg.Float32 {
		return float64(pg.View[float32](t)[i])
	}
	return pg.View[float64](t)[i]
}

func set(t pg.Tensor, i int, v float64) {
	if t.Dtype == pg.Float32 {
		pg.View[float32](t)[i] = float32(v)
	} else {
		pg.View[float64](t)[i] = v
	}
}

func near(got, want []pg.Tensor) error {
	for k := range want {
		for i := range want[k].Len() {
			g, w := value(got[k], i), value(want[k], i)
			tol := 1e-12 // float64 parameters are averaged in float64, as torch.cat promotes
			if got[k].Dtype == pg.Float32 {
				tol = 1e-6
			}
			if math.Abs(g-w) > tol*max(1, math.Abs(w)) {
				return fmt.Errorf("parameter %d element %d: %v, want %v", k, i, g, w)
			}
		}
	}
	return nil
}

func same(a, b []pg.Tensor) bool {
	for k := range a {
		for i := range a[k].Len() {
			if value(a[k], i) != value(b[k], i) {
				return false
			}
		}
	}
	return true
}

func TestAverageParameters(t *testing.T) {
	for _, backend := range []string{"local", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			gs := testworld.Groups(t, backend, 3)
			got := make([][]pg.Tensor, 3)
			testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
				got[r] = rankParams(r, 1)
				return averaging.AverageParameters(testworld.Ctx(t), g, got[r])
			}))
			want := mean([]int{0, 1, 2}, 1)
			for r := range got {
				if err := near(got[r], want); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				if !same(got[r], got[0]) {
					t.Fatalf("rank %d's average differs from rank 0's", r)
				}
			}
		})
	}
}

func TestAverageParametersRefuses(t *testing.T) {
	g := testworld.Local(t, 1)[0]
	if err := averaging.AverageParameters(context.Background(), g, []pg.Tensor{pg.Int32s([]int32{1})}); err == nil {
		t.Fatal("an int32 parameter was averaged")
	}
	if _, err := averaging.NewPeriodicModelAverager(g, averaging.PeriodicOptions{Period: 0}); err == nil {
		t.Fatal("period 0 accepted")
	}
	if _, err := averaging.NewPeriodicModelAverager(g, averaging.PeriodicOptions{Period: 2, WarmupSteps: -1}); err == nil {
		t.Fatal("negative warm-up accepted")
	}
}

// TestPeriodicModelAverager: warm-up 3, period 2, steps 0..9: torch
// averages at steps 3, 5, 7 and 9 and leaves the parameters alone on the
// others.
func TestPeriodicModelAverager(t *testing.T) {
	gs := testworld.Groups(t, "tcp", 3)
	avgs := make([]*averaging.PeriodicModelAverager, 3)
	for r, g := range gs {
		var err error
		if avgs[r], err = averaging.NewPeriodicModelAverager(g,
			averaging.PeriodicOptions{Period: 2, WarmupSteps: 3}); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 10 {
		want := step >= 3 && (step-3)%2 == 0
		got := make([][]pg.Tensor, 3)
		did := make([]bool, 3)
		testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) (err error) {
			got[r] = rankParams(r, step)
			did[r], err = avgs[r].AverageParameters(testworld.Ctx(t), got[r])
			return err
		}))
		for r := range got {
			if did[r] != want {
				t.Fatalf("step %d rank %d: averaged %v, want %v", step, r, did[r], want)
			}
			expect := rankParams(r, step)
			if want {
				expect = mean([]int{0, 1, 2}, step)
			}
			if err := near(got[r], expect); err != nil {
				t.Fatalf("step %d rank %d: %v", step, r, err)
			}
		}
	}
	if avgs[0].Step() != 10 {
		t.Fatalf("step count %d, want 10", avgs[0].Step())
	}
}

// TestHierarchicalModelAverager: 4 ranks, groups of 2 every 2 steps and
// all 4 every 4, warm-up 1: step 0 warms up, odd steps do nothing, steps
// 2 and 6 average in pairs {0,1} {2,3}, steps 4 and 8 over all.
func TestHierarchicalModelAverager(t *testing.T) {
	gs := testworld.Groups(t, "local", 4)
	avgs := make([]*averaging.HierarchicalModelAverager, 4)
	testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) (err error) {
		avgs[r], err = averaging.NewHierarchicalModelAverager(testworld.Ctx(t), g, averaging.HierarchicalOptions{
			Levels: []averaging.Level{{Period: 2, GroupSize: 2}, {Period: 4, GroupSize: 4}}, WarmupSteps: 1})
		return err
	}))
	defer func() {
		for _, a := range avgs {
			a.Close()
		}
	}()
	for step := range 9 {
		got := make([][]pg.Tensor, 4)
		sizes := make([]int, 4)
		testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) (err error) {
			got[r] = rankParams(r, step)
			sizes[r], err = avgs[r].AverageParameters(testworld.Ctx(t), got[r])
			return err
		}))
		for r := range got {
			wantSize, expect := 0, rankParams(r, step)
			switch {
			case step == 0 || step%2 == 1:
			case step%4 == 0:
				wantSize, expect = 4, mean([]int{0, 1, 2, 3}, step)
			default:
				wantSize, expect = 2, mean([]int{r &^ 1, r | 1}, step)
			}
			if sizes[r] != wantSize {
				t.Fatalf("step %d rank %d: averaged over %d ranks, want %d", step, r, sizes[r], wantSize)
			}
			if err := near(got[r], expect); err != nil {
				t.Fatalf("step %d rank %d: %v", step, r, err)
			}
		}
	}
}

func TestHierarchicalRefuses(t *testing.T) {
	g := testworld.Local(t, 1)[0]
	for name, o := range map[string]averaging.HierarchicalOptions{
		"empty":        {},
		"zero period":  {Levels: []averaging.Level{{Period: 0, GroupSize: 1}}},
		"descending":   {Levels: []averaging.Level{{Period: 4, GroupSize: 1}, {Period: 2, GroupSize: 1}}},
		"last not all": {Levels: []averaging.Level{{Period: 2, GroupSize: 2}}},
		"warm-up":      {Levels: []averaging.Level{{Period: 2, GroupSize: 1}}, WarmupSteps: -1},
	} {
		if _, err := averaging.NewHierarchicalModelAverager(context.Background(), g, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
