package pg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Two ranks, each in its own goroutine as it would be in its own process,
// sum a tensor with the in-process backend.
func Example() {
	groups, err := local.New(2, local.Options{Timeout: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	data := [][]float32{{1, 2, 3}, {10, 20, 30}}
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			ctx := context.Background()
			w := g.AllReduce(ctx, pg.Float32s(data[r]), pg.Op(pg.Sum))
			if err := w.Wait(ctx); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	for _, g := range groups {
		_ = g.Close()
	}
	fmt.Println("rank 0:", data[0])
	fmt.Println("rank 1:", data[1])
	// Output:
	// rank 0: [11 22 33]
	// rank 1: [11 22 33]
}

// Errors carry the op, the ranks involved and a sentinel to branch on.
func ExampleCollectiveError() {
	groups, _ := local.New(2, local.Options{Timeout: 50 * time.Millisecond})
	defer func() {
		for _, g := range groups {
			_ = g.Close()
		}
	}()
	// Rank 1 never joins, so rank 0's barrier times out.
	err := groups[0].Barrier(context.Background()).Wait(context.Background())
	var ce *pg.CollectiveError
	if errors.As(err, &ce) {
		fmt.Println(ce.Op, ce.Rank, ce.Peer, errors.Is(err, pg.ErrTimeout))
	}
	// Output: barrier 0 1 true
}
