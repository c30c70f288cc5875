package local_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Three ranks in one process average a gradient. Each rank would normally
// run in its own goroutine, as here.
func Example() {
	groups, err := local.New(3, local.Options{})
	if err != nil {
		panic(err)
	}
	grads := [][]float32{{1, 2}, {3, 4}, {5, 9}}
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			w := g.AllReduce(context.Background(), pg.Float32s(grads[r]), pg.Op(pg.Avg))
			if err := w.Wait(context.Background()); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	for _, g := range groups {
		_ = g.Close()
	}
	fmt.Println(grads)
	// Output: [[3 5] [3 5] [3 5]]
}
