package commhook_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// hierarchicalPlan is a model of three buckets, one of them float-awkward
// in length.
var hierarchicalPlan = [][]layer{{{16, 8}, {8}}, {{33}}, {{4, 4}, {5}, {1}}}

// runHierarchical runs one iteration of Hierarchical on every rank, with
// the host options of each rank, and returns every rank's buckets and
// host layout.
func runHierarchical(t *testing.T, gs []pg.ProcessGroup, d pg.Dtype,
	opts func(r int) commhook.HierarchicalOptions) ([][]*commhook.GradBucket, [][]int) {
	t.Helper()
	ctx := testCtx(t)
	n := len(gs)
	out := make([][]*commhook.GradBucket, n)
	layouts := make([][]int, n)
	onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
		h, err := commhook.NewHierarchical(opts(r))
		if err != nil {
			return err
		}
		defer h.Close()
		bs := newBuckets(d, hierarchicalPlan)
		randomGrads(bs, 7, r, 1)
		for it := range 2 { // the second iteration reuses the subgroups
			if it == 1 {
				randomGrads(bs, 7, r, 1)
			}
			if err := iterate(ctx, h, g, bs); err != nil {
				return err
			}
		}
		out[r], layouts[r] = bs, h.HostLayout()
		return nil
	})
	return out, layouts
}

// flatAverage is the average over ranks of the gradients runHierarchical
// starts from, summed in float64.
func flatAverage(n int) [][]float64 {
	var avg [][]float64
	for r := range n {
		bs := newBuckets(pg.Float64, hierarchicalPlan)
		randomGrads(bs, 7, r, 1)
		for b, gb := range bs {
			if r == 0 {
				avg = append(avg, make([]float64, gb.Buffer.Len()))
			}
			for i, v := range values(gb) {
				avg[b][i] += v / float64(n)
			}
		}
	}
	return avg
}

func checkHierarchical(t *testing.T, got [][]*commhook.GradBucket, tol float64) {
	t.Helper()
	want := flatAverage(len(got))
	for r := range got {
		for b, gb := range got[r] {
			v := values(gb)
			if r > 0 && !slices.Equal(v, values(got[0][b])) {
				t.Errorf("rank %d bucket %d differs from rank 0's: every rank must end with the same bits", r, b)
			}
			for i := range v {
				if math.Abs(v[i]-want[b][i]) > tol {
					t.Fatalf("rank %d bucket %d [%d] = %v, flat average %v", r, b, i, v[i], want[b][i])
				}
			}
		}
	}
}

func TestHierarchicalEqualsFlatAverage(t *testing.T) {
	for _, backend := range []string{"local", "tcp"} {
		t.Run(backend+"/2x2 by RanksPerHost", func(t *testing.T) {
			gs := groupsOn(t, backend, 4)
			got, layouts := runHierarchical(t, gs, pg.Float64, func(int) commhook.HierarchicalOptions {
				return commhook.HierarchicalOptions{RanksPerHost: 2}
			})
			checkHierarchical(t, got, 1e-12)
			if !slices.Equal(layouts[3], []int{0, 0, 1, 1}) {
				t.Errorf("layout %v, want [0 0 1 1]", layouts[3])
			}
		})
		t.Run(backend+"/interleaved host labels, float32", func(t *testing.T) {
			gs := groupsOn(t, backend, 4)
			got, layouts := runHierarchical(t, gs, pg.Float32, func(r int) commhook.HierarchicalOptions {
				return commhook.HierarchicalOptions{Host: []string{"a", "b"}[r%2]}
			})
			checkHierarchical(t, got, 1e-5)
			if !slices.Equal(layouts[0], []int{0, 1, 0, 1}) {
				t.Errorf("layout %v, want [0 1 0 1]", layouts[0])
			}
		})
	}
	t.Run("local/uneven hosts of 3, 1 and 1 ranks", func(t *testing.T) {
		gs := localGroups(t, 5)
		got, layouts := runHierarchical(t, gs, pg.Float64, func(r int) commhook.HierarchicalOptions {
			return commhook.HierarchicalOptions{Host: []string{"x", "x", "y", "x", "z"}[r]}
		})
		checkHierarchical(t, got, 1e-12)
		if !slices.Equal(layouts[4], []int{0, 0, 1, 0, 2}) {
			t.Errorf("layout %v", layouts[4])
		}
	})
	t.Run("local/one host", func(t *testing.T) {
		got, _ := runHierarchical(t, localGroups(t, 3), pg.Float64, func(int) commhook.HierarchicalOptions {
			return commhook.HierarchicalOptions{Host: "same"}
		})
		checkHierarchical(t, got, 1e-12)
	})
}

func groupsOn(t *testing.T, backend string, n int) []pg.ProcessGroup {
	if backend == "tcp" {
		return tcpGroups(t, n, 0)
	}
	return localGroups(t, n)
}

func TestHierarchicalRejectsBadOptionsAndReuse(t *testing.T) {
	if _, err := commhook.NewHierarchical(commhook.HierarchicalOptions{RanksPerHost: -1}); err == nil {
		t.Error("negative RanksPerHost accepted")
	}
	gs := localGroups(t, 2)
	ctx := testCtx(t)
	hs := make([]*commhook.Hierarchical, 2)
	onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
		h, err := commhook.NewHierarchical(commhook.HierarchicalOptions{RanksPerHost: 1})
		hs[r] = h
		if err != nil {
			return err
		}
		return h.Setup(ctx, g)
	})
	// A hook set up for rank 0 of 2 refuses another rank's group.
	b := newBuckets(pg.Float32, [][]layer{{{2}}})[0]
	if err := hs[0].Run(ctx, gs[1], b).Wait(ctx); err == nil {
		t.Error("a hook set up on rank 0 ran as rank 1")
	}
	for _, h := range hs {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	}
	if err := hs[1].Run(ctx, gs[1], b).Wait(ctx); err == nil {
		t.Error("ran after Close")
	}
}

// A rank that leaves after setup fails the others' steps through the
// subgroups' aborts, not at the group timeout.
func TestHierarchicalDeadRankFailsEveryStep(t *testing.T) {
	gs := tcpGroups(t, 4, 0)
	ctx := testCtx(t)
	hs := make([]*commhook.Hierarchical, 4)
	onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
		h, err := commhook.NewHierarchical(commhook.HierarchicalOptions{RanksPerHost: 2})
		hs[r] = h
		if err != nil {
			return err
		}
		return h.Setup(ctx, g)
	})
	hs[3].Close()
	gs[3].Close()
	errs := make([]error, 3)
	onRanks(t, gs[:3], func(r int, g pg.ProcessGroup) error {
		defer hs[r].Close()
		bs := newBuckets(pg.Float32, [][]layer{{{8}}, {{4}}})
		errs[r] = iterate(ctx, hs[r], g, bs)
		return nil
	})
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if err == nil || errors.Is(err, pg.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("rank %d: %v, want a failure from the dead rank 3 before any timeout", r, err)
		}
	}
}
