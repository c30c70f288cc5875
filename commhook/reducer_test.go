package commhook_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"github.com/prometheus/client_golang/prometheus"
)

// reducerParams are an MLP's parameters as the reducer sees them.
var reducerParams = []reducer.Param{
	{Name: "fc1.weight", Shape: []int{40, 64}, Dtype: pg.Float32}, {Name: "fc1.bias", Shape: []int{64}, Dtype: pg.Float32},
	{Name: "fc2.weight", Shape: []int{64, 32}, Dtype: pg.Float32}, {Name: "fc2.bias", Shape: []int{32}, Dtype: pg.Float32},
	{Name: "fc3.weight", Shape: []int{32, 10}, Dtype: pg.Float32}, {Name: "fc3.bias", Shape: []int{10}, Dtype: pg.Float32},
}

// trainThroughReducer runs iters iterations of random gradients through
// a reducer with hook on every rank (gradients ready last layer first,
// several buckets, FindUnusedParameters, whose own allreduce must not cut
// into a hook's chained collectives) and returns each rank's final
// gradients, concatenated.
func trainThroughReducer(t *testing.T, gs []pg.ProcessGroup, hook func() commhook.Hook, iters int) [][]float32 {
	return trainObserved(t, gs, hook, iters, nil)
}

// trainObserved is trainThroughReducer with each rank's reducer metrics
// on regs[rank]; nil regs means metrics off.
func trainObserved(t *testing.T, gs []pg.ProcessGroup, hook func() commhook.Hook, iters int,
	regs []*prometheus.Registry) [][]float32 {
	out := make([][]float32, len(gs))
	ctx := testCtx(t)
	onRanks(t, gs, func(rank int, g pg.ProcessGroup) error {
		opts := reducer.Options{BucketCapBytes: 6000, FirstBucketBytes: 2000, FindUnusedParameters: true}
		if hook != nil {
			opts.Hook = hook()
		}
		if regs != nil {
			opts.Registerer = regs[rank]
		}
		red, err := reducer.New(ctx, g, reducerParams, opts)
		if err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(uint64(rank), 3))
		for it := range iters {
			if err := red.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
				return err
			}
			grads := make([][]float32, len(reducerParams))
			for i := len(reducerParams) - 1; i >= 0; i-- {
				grads[i] = make([]float32, reducerParams[i].Numel())
				for j := range grads[i] {
					grads[i][j] = float32(rng.NormFloat64())
				}
				if err := red.MarkReady(i, pg.Float32s(grads[i])); err != nil {
					return err
				}
			}
			if err := red.Finalize(ctx); err != nil {
				return fmt.Errorf("iteration %d: %w", it, err)
			}
			if it == iters-1 {
				out[rank] = slices.Concat(grads...)
			}
		}
		return nil
	})
	return out
}

// Every hook works through the reducer over TCP with delays, several
// buckets in flight and FindUnusedParameters; the ranks end with the same
// bits. Allreduce registered is the default path, bit for bit.
func TestHooksThroughTheReducer(t *testing.T) {
	const world, iters = 3, 5
	opts := commhook.DefaultPowerSGDOptions()
	opts.StartIter = 2
	hooks := map[string]func() commhook.Hook{
		"default":   nil,
		"allreduce": func() commhook.Hook { return commhook.Allreduce{} },
		"fp16":      commhook.FP16Compress,
		"bf16":      commhook.BF16Compress,
		"powersgd": func() commhook.Hook {
			h, _ := commhook.NewPowerSGD(opts)
			return h
		},
		"batched_powersgd": func() commhook.Hook {
			h, _ := commhook.NewBatchedPowerSGD(opts)
			return h
		},
		"fp16_powersgd": func() commhook.Hook {
			h, _ := commhook.NewPowerSGD(opts)
			return commhook.Compress(pg.Float16, h)
		},
	}
	results := map[string][][]float32{}
	for _, name := range slices.Sorted(maps.Keys(hooks)) {
		gs := tcpGroups(t, world, 0)
		for r := range gs {
			gs[r] = &jittery{ProcessGroup: gs[r], rng: rand.New(rand.NewPCG(uint64(r), 9))}
		}
		out := trainThroughReducer(t, gs, hooks[name], iters)
		for r := range out {
			if !slices.Equal(out[r], out[0]) {
				t.Fatalf("%s: rank %d ended with other gradients than rank 0", name, r)
			}
		}
		results[name] = out
	}
	if !slices.Equal(results["default"][0], results["allreduce"][0]) {
		t.Error("the allreduce hook differs from the default path")
	}
}
