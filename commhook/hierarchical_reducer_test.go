package commhook_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/goddp/ddp/commhook"
)

// lastInputs regenerates the gradients trainThroughReducer feeds rank
// in its last iteration, per parameter.
func lastInputs(rank, iters int) [][]float64 {
	rng := rand.New(rand.NewPCG(uint64(rank), 3))
	grads := make([][]float64, len(reducerParams))
	for range iters {
		for i := len(reducerParams) - 1; i >= 0; i-- {
			grads[i] = make([]float64, reducerParams[i].Numel())
			for j := range grads[i] {
				grads[i][j] = float64(float32(rng.NormFloat64()))
			}
		}
	}
	return grads
}

// Through the reducer, over TCP, 2 hosts × 2 ranks: Hierarchical gives
// the default hook's average within float32 rounding, the same bits on
// every rank, and Adasum gives the per-parameter tree of the formula
// (so its result does not depend on how parameters are bucketed).
func TestHorovodHooksThroughTheReducer(t *testing.T) {
	const world, iters = 4, 3
	var mu sync.Mutex
	var made []*commhook.Hierarchical
	defer func() {
		for _, h := range made {
			h.Close()
		}
	}()
	hier := func() commhook.Hook {
		h, _ := commhook.NewHierarchical(commhook.HierarchicalOptions{RanksPerHost: 2})
		mu.Lock()
		made = append(made, h)
		mu.Unlock()
		return h
	}
	flat := trainThroughReducer(t, tcpGroups(t, world, 0), nil, iters)
	got := trainThroughReducer(t, tcpGroups(t, world, 0), hier, iters)
	for r := range got {
		if !slices.Equal(got[r], got[0]) {
			t.Fatalf("hierarchical: rank %d ended with other gradients than rank 0", r)
		}
	}
	for i := range flat[0] {
		if d := math.Abs(float64(got[0][i] - flat[0][i])); d > 1e-6 {
			t.Fatalf("hierarchical [%d] = %v, flat allreduce %v", i, got[0][i], flat[0][i])
		}
	}

	ada := trainThroughReducer(t, tcpGroups(t, world, 0), func() commhook.Hook { return commhook.NewAdasum() }, iters)
	var want []float64
	inputs := make([][][]float64, world)
	for r := range world {
		inputs[r] = lastInputs(r, iters)
	}
	for p := range reducerParams {
		vs := make([][]float64, world)
		for r := range world {
			vs[r] = inputs[r][p]
		}
		want = append(want, adasumTree(vs)[0]...)
	}
	for r := range ada {
		if !slices.Equal(ada[r], ada[0]) {
			t.Fatalf("adasum: rank %d ended with other gradients than rank 0", r)
		}
	}
	for i, w := range want {
		if d := math.Abs(float64(ada[0][i]) - w); d > 1e-5*(1+math.Abs(w)) {
			t.Fatalf("adasum [%d] = %v, reference %v", i, ada[0][i], w)
		}
	}
}
