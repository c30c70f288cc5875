package commhook_test

import (
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

func newBatched(t testing.TB, mutate func(*commhook.PowerSGDOptions)) *commhook.BatchedPowerSGD {
	t.Helper()
	o := commhook.DefaultPowerSGDOptions()
	o.StartIter = 2
	if mutate != nil {
		mutate(&o)
	}
	h, err := commhook.NewBatchedPowerSGD(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A bucket of N elements is one ⌈√N⌉×⌈√N⌉ matrix, zero-padded: its error
// feedback covers the padded matrix, its P and Q have ⌈√N⌉ rows, and the
// statistics count N before and 2·⌈√N⌉·r after.
func TestBatchedPowerSGDPadsToASquare(t *testing.T) {
	gs := localGroups(t, 1)
	for _, c := range []struct{ n, side int }{{1, 1}, {2, 2}, {4, 2}, {5, 3}, {49, 7}, {50, 8}, {1<<20 + 1, 1025}} {
		h := newBatched(t, nil)
		bs := newBuckets(pg.Float32, [][]layer{{{c.n}}})
		for it := range 3 {
			randomGrads(bs, uint64(it), 0, 1)
			if err := iterate(testCtx(t), h, gs[0], bs); err != nil {
				t.Fatal(err)
			}
		}
		st := h.State()
		if len(st["error/0"]) != c.side*c.side || len(st["q/0"]) != c.side {
			t.Errorf("N=%d: error has %d values, Q %d; want %d and %d", c.n, len(st["error/0"]), len(st["q/0"]), c.side*c.side,
				c.side)
		}
		if _, before, after := h.CompressionStats(); before != c.n || after != 2*c.side {
			t.Errorf("N=%d: stats %d before, %d after", c.n, before, after)
		}
		if bs[0].Buffer.Len() != c.n {
			t.Errorf("N=%d: the bucket now holds %d", c.n, bs[0].Buffer.Len())
		}
	}
}

// A bucket that, viewed as a square matrix, is rank 1 on every rank comes
// back as the average to float tolerance; a bucket that needs padding
// comes back approximated, truncated to its length, the same everywhere.
func TestBatchedPowerSGDReconstructsARankOneBucket(t *testing.T) {
	const world, side = 3, 9
	gs := localGroups(t, world)
	hooks := make([]*commhook.BatchedPowerSGD, world)
	for r := range hooks {
		hooks[r] = newBatched(t, nil)
	}
	ctx := testCtx(t)
	for it := range 5 {
		outs := make([][][]float64, world)
		onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
			bs := newBuckets(pg.Float64, [][]layer{{{side, side}}, {{40}}})
			fill(bs, func(b, i int) float64 {
				if b == 0 {
					return float64(r+1) * math.Sin(float64(i/side+1)) * math.Cos(float64(i%side))
				}
				return float64(r*40 + i)
			})
			err := iterate(ctx, hooks[r], g, bs)
			outs[r] = [][]float64{values(bs[0]), values(bs[1])}
			return err
		})
		for r := range world {
			if !slices.Equal(outs[r][0], outs[0][0]) || !slices.Equal(outs[r][1], outs[0][1]) {
				t.Fatalf("iteration %d: rank %d differs", it, r)
			}
		}
		for i, got := range outs[0][0] {
			want := 2 * math.Sin(float64(i/side+1)) * math.Cos(float64(i%side))
			if math.Abs(got-want) > 1e-12 {
				t.Fatalf("iteration %d element %d: %v, want %v", it, i, got, want)
			}
		}
	}
	if hooks[0].State()["iter"][0] != 5 {
		t.Errorf("iteration count %v", hooks[0].State()["iter"])
	}
}

// State is keyed by the bucket's parameters: a bucket of other
// parameters (as in the first iteration after a resume, before the
// reducer rebuilds its buckets) starts fresh instead of failing, and the
// old buckets' state is kept for when they come back.
func TestBatchedPowerSGDStateFollowsTheParameters(t *testing.T) {
	gs := localGroups(t, 1)
	h := newBatched(t, nil)
	ctx := testCtx(t)
	split := newBuckets(pg.Float32, [][]layer{{{10, 3}}, {{20}}})
	for it := range 3 {
		randomGrads(split, uint64(it), 0, 1)
		if err := iterate(ctx, h, gs[0], split); err != nil {
			t.Fatal(err)
		}
	}
	kept := h.State()
	whole := newBuckets(pg.Float32, [][]layer{{{10, 3}, {20}}})
	randomGrads(whole, 9, 0, 1)
	if err := iterate(ctx, h, gs[0], whole); err != nil {
		t.Fatal(err)
	}
	st := h.State()
	if len(st["error/0,1"]) != 64 || !slices.Equal(st["error/0"], kept["error/0"]) ||
		!slices.Equal(st["q/1"], kept["q/1"]) {
		t.Errorf("state keys %v", slices.Sorted(maps.Keys(st)))
	}
}

// Before StartIter, BatchedPowerSGD is Allreduce, bit for bit.
func TestBatchedPowerSGDBeforeStartIsAllreduce(t *testing.T) {
	const world = 3
	gs := localGroups(t, world)
	hooks := make([]*commhook.BatchedPowerSGD, world)
	for r := range hooks {
		hooks[r] = newBatched(t, func(o *commhook.PowerSGDOptions) { o.StartIter = 3 })
	}
	ctx := testCtx(t)
	for it := range 3 {
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
			return nil
		})
	}
	if commhook.Name(hooks[0]) != "batched_powersgd" {
		t.Error("name")
	}
}
