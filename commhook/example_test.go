package commhook_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// A custom hook: sum the bucket across ranks without averaging. A hook
// starts its communication and returns the Work at once; when the Work
// is done, the bucket's buffer holds the result.
func ExampleHookFunc() {
	sum := commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
		return g.AllReduce(ctx, b.Buffer, pg.Op(pg.Sum))
	})
	groups, _ := local.New(2, local.Options{})
	ctx := context.Background()
	grads := [][]float32{{1, 2}, {10, 20}}
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			b := &commhook.GradBucket{Index: 0, Buffer: pg.Float32s(grads[r]), IsLast: true}
			_ = sum.Run(ctx, g, b).Wait(ctx)
		})
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	fmt.Println(grads[0], grads[1])
	// Output: [11 22] [11 22]
}
