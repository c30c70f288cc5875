package commhook_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Adasum of two ranks' gradients a = (3, 0) and b = (1, 1): a·b = 3,
// ‖a‖² = 9, ‖b‖² = 2, so the result is (1 − 3/18)·a + (1 − 3/4)·b.
func ExampleNewAdasum() {
	groups, _ := local.New(2, local.Options{})
	ctx := context.Background()
	grads := [][]float64{{3, 0}, {1, 1}}
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			h := commhook.NewAdasum() // one per rank
			b := &commhook.GradBucket{Buffer: pg.Float64s(grads[r]), IsLast: true,
				Params: []commhook.ParamView{{Name: "w", Shape: []int{2}, Len: 2}}}
			if err := h.Run(ctx, g, b).Wait(ctx); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	fmt.Printf("%.4f %.4f\n", grads[0], grads[1])
	// Output: [2.7500 0.2500] [2.7500 0.2500]
}
