package commhook_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Two ranks, each on a host of its own: the first iteration averages the
// bucket over both, as plain DDP; from the second (StartLocalSGDIter 1)
// each host averages alone, so each rank keeps its own gradient, and a
// model averager (package averaging) brings the parameters together.
func ExampleNewPostLocalSGD() {
	groups, err := local.New(2, local.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	out := make([][]float32, 2)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			ctx := context.Background()
			h, err := commhook.NewPostLocalSGD(ctx, g, commhook.PostLocalSGDOptions{StartLocalSGDIter: 1, RanksPerHost: 1})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer h.Close()
			for range 2 {
				grad := []float32{float32(r + 1)} // rank 0: 1, rank 1: 2
				b := &commhook.GradBucket{Buffer: pg.Float32s(grad), IsLast: true}
				if err := h.Run(ctx, g, b).Wait(ctx); err != nil {
					fmt.Println(err)
				}
				out[r] = append(out[r], grad[0])
			}
		})
	}
	wg.Wait()
	fmt.Println("rank 0, iterations 0 and 1:", out[0])
	fmt.Println("rank 1, iterations 0 and 1:", out[1])
	// Output:
	// rank 0, iterations 0 and 1: [1.5 1]
	// rank 1, iterations 0 and 1: [1.5 2]
}
