package commhook_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// PowerSGD with torch's defaults, except that compression starts at the
// third iteration. Each rank needs its own hook: it holds the rank's
// error feedback. A gradient of rank 1 comes back whole, although each
// rank sent 4+6 numbers for its 4×6 matrix instead of 24.
func ExamplePowerSGD() {
	opts := commhook.DefaultPowerSGDOptions()
	opts.StartIter = 1
	_, err := commhook.NewPowerSGD(opts)
	fmt.Println(errors.Is(err, commhook.ErrInvalidConfig))

	opts.StartIter = 2
	groups, _ := local.New(2, local.Options{})
	ctx := context.Background()
	results := make([][]float64, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			h, _ := commhook.NewPowerSGD(opts) // in a real job: reducer.Options{Hook: h}
			for range 3 {                      // iterations 0 and 1 are plain allreduce
				grad := make([]float64, 4*6) // rank r's gradient: (r+1)·u·vᵀ
				for i := range 4 {
					for j := range 6 {
						grad[i*6+j] = float64(r+1) * float64(i+1) * float64(j-2)
					}
				}
				b := &commhook.GradBucket{Buffer: pg.Float64s(grad), IsLast: true,
					Params: []commhook.ParamView{{Name: "w", Shape: []int{4, 6}, Len: 24}}}
				if err := h.Run(ctx, g, b).Wait(ctx); err != nil {
					fmt.Println(err)
				}
				results[r] = grad
			}
		})
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	for i := range 4 { // the average, 1.5·u·vᵀ
		row := results[0][i*6 : i*6+6]
		for j := range row {
			row[j] = math.Round(row[j]*1e9)/1e9 + 0 // + 0 turns -0 into 0
		}
		fmt.Println(row)
	}
	// Output:
	// true
	// [-3 -1.5 0 1.5 3 4.5]
	// [-6 -3 0 3 6 9]
	// [-9 -4.5 0 4.5 9 13.5]
	// [-12 -6 0 6 12 18]
}

// A hook that post-processes the average: it clips every element to
// [-1, 1] once the allreduce is done. Run must return at once, so the
// clipping waits on a goroutine that completes a Future; the bucket must
// not be touched before the allreduce's Work is done.
func ExampleHookFunc_chained() {
	clip := commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
		avg := commhook.Allreduce{}.Run(ctx, g, b)
		done := pg.NewFuture()
		go func() {
			err := avg.Wait(ctx)
			if err == nil {
				for i, x := range pg.View[float32](b.Buffer) {
					pg.View[float32](b.Buffer)[i] = max(-1, min(1, x))
				}
			}
			done.Complete(err)
		}()
		return done
	})
	groups, _ := local.New(2, local.Options{})
	ctx := context.Background()
	grads := [][]float32{{0.5, 3, -8}, {0.5, 1, 2}}
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			b := &commhook.GradBucket{Buffer: pg.Float32s(grads[r]), IsLast: true}
			_ = clip.Run(ctx, g, b).Wait(ctx)
		})
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	fmt.Println(grads[0], grads[1])
	// Output: [0.5 1 -1] [0.5 1 -1]
}
