package gomlxddp_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// TestSameAsOneProcess: N ranks, each on its shard of every batch, end
// with the parameters that GoMLX's own Trainer reaches alone on the whole
// batches, and with the same bits on every rank.
func TestSameAsOneProcess(t *testing.T) {
	const steps, rows = 12, 12
	for _, opt := range []string{"sgd", "adam"} {
		_, want := reference(t, opt, steps, rows)
		for _, size := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", opt, size), func(t *testing.T) {
				got := runRanks(t, opt, size, steps, rows, gomlxddp.Options{})
				checkClose(t, got[0].Params, want, 1e-9)
				for r := 1; r < size; r++ {
					checkBitwise(t, r, got[r].Params, got[0].Params)
				}
			})
		}
	}
}

func checkClose(t *testing.T, got, want map[string][]float64, tol float64) {
	t.Helper()
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("%d trainable variables, want %d", len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Fatalf("%s: %d values, want %d", name, len(g), len(w))
		}
		for i := range w {
			if d := math.Abs(g[i] - w[i]); d > tol*math.Max(1, math.Abs(w[i])) || math.IsNaN(g[i]) {
				t.Fatalf("%s[%d] = %v, one process on the whole batch: %v (diff %.3g)", name, i, g[i], w[i], d)
			}
		}
	}
}

func checkBitwise(t *testing.T, rank int, got, rank0 map[string][]float64) {
	t.Helper()
	for name, w := range rank0 {
		g := got[name]
		for i := range w {
			if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
				t.Fatalf("rank %d: %s[%d] = %v, rank 0 has %v: replicas differ", rank, name, i, g[i], w[i])
			}
		}
	}
	if len(got) != len(rank0) || !slices.Equal(keys(got), keys(rank0)) {
		t.Fatalf("rank %d has variables %v, rank 0 %v", rank, keys(got), keys(rank0))
	}
}

func keys(m map[string][]float64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestBucketsAndHook: with small buckets the gradients travel in several
// buckets, through a comm hook of the user's, and the result is the same.
func TestBucketsAndHook(t *testing.T) {
	const steps, rows, size = 6, 12, 2
	_, want := reference(t, "sgd", steps, rows)
	var calls atomic.Int64
	hook := commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
		calls.Add(1)
		return commhook.Allreduce{}.Run(ctx, g, b)
	})
	o := gomlxddp.Options{Reducer: reducer.Options{BucketCapBytes: 64, FirstBucketBytes: 64, Hook: hook}}
	got := runRanks(t, "sgd", size, steps, rows, o)
	checkClose(t, got[0].Params, want, 1e-9)
	checkBitwise(t, 1, got[1].Params, got[0].Params)
	// The first iteration has one bucket (DDP's rule before the rebuild);
	// later ones one per 64 bytes or so: 4 parameters, 8 float64s each at most.
	t.Logf("hook calls per rank: %d", calls.Load()/size)
	if perRank := calls.Load() / size; perRank < 1+2*(steps-1) {
		t.Errorf("the hook ran %d times per rank in %d steps; want several buckets per step", perRank, steps)
	}
}

// TestRefusedOptions: options this engine cannot honour are refused, with
// the reason.
func TestRefusedOptions(t *testing.T) {
	for name, o := range map[string]gomlxddp.Options{
		"FindUnusedParameters": {Reducer: reducer.Options{FindUnusedParameters: true}},
		"GradientAsBucketView": {Reducer: reducer.Options{GradientAsBucketView: true}},
		"Timeout":              {Timeout: -1},
	} {
		groups := tcpGroups(t, 1)
		_, err := gomlxddp.New(newBackend(t), newContext(1), groups[0], mlp, nil, newOptimizer(t, "sgd"), o)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: New said %v", name, err)
		}
	}
}
