package reducer_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/reducer"
)

// An engine that computes in float16 hands the reducer float16 gradients
// of a float32 parameter (0.1 and 0.2 arrive as 0.099976 and 0.19995).
// Reduced in float16, their sum rounds once more before the division,
// and 60000 + 60000 overflows to +Inf; reduced in float32, neither
// happens. Gradient(i) is float32 either way.
func ExampleMixedPrecision() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	params := []reducer.Param{{Name: "w", Shape: []int{3}, Dtype: pg.Float32}}
	own := [][]float32{{0.1, 1, 60000}, {0.2, 3, 60000}} // each rank's gradient
	for _, reduce := range []pg.Dtype{pg.Float16, pg.Float32} {
		groups, err := local.New(2, local.Options{Timeout: 30 * time.Second})
		if err != nil {
			fmt.Println(err)
			return
		}
		results := make([][]float32, len(groups))
		var wg sync.WaitGroup
		for rank, g := range groups {
			wg.Go(func() {
				defer g.Close()
				mp := &reducer.MixedPrecision{ParamDtype: pg.Float16, ReduceDtype: reduce}
				r, err := reducer.New(ctx, g, params, reducer.Options{MixedPrecision: mp})
				if err != nil {
					fmt.Println(err)
					return
				}
				grad := pg.NewTensor(pg.Float16, 3) // the engine's float16 gradient
				_ = backend.Convert(grad, pg.Float32s(own[rank]))
				if err := r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
					fmt.Println(err)
					return
				}
				if err := r.MarkReady(0, grad); err != nil {
					fmt.Println(err)
					return
				}
				if err := r.Finalize(ctx); err != nil {
					fmt.Println(err)
					return
				}
				results[rank] = pg.View[float32](r.Gradient(0)) // float32
			})
		}
		wg.Wait()
		fmt.Printf("reduced in %v: %v\n", reduce, results[0])
	}
	// Output:
	// reduced in float16: [0.14990234 2 +Inf]
	// reduced in float32: [0.14996338 2 60000]
}
