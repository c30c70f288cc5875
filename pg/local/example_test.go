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

// Three ranks exchange uneven chunks with AllToAll: rank i sends i+1
// copies of 10*i+j to rank j, so rank j receives 1, 2 and 3 elements from
// ranks 0, 1 and 2.
func ExampleGroup_AllToAll() {
	const n = 3
	groups, err := local.New(n, local.Options{})
	if err != nil {
		panic(err)
	}
	outs := make([][]int32, n)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			var in []int32
			inSplits, outSplits := make([]int, n), make([]int, n)
			for j := range n {
				for range r + 1 {
					in = append(in, int32(10*r+j))
				}
				inSplits[j], outSplits[j] = r+1, j+1
			}
			outs[r] = make([]int32, n*(n+1)/2)
			w := g.AllToAll(context.Background(), pg.Int32s(outs[r]), pg.Int32s(in), outSplits, inSplits)
			if err := w.Wait(context.Background()); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	for _, g := range groups {
		_ = g.Close()
	}
	for r, out := range outs {
		fmt.Println("rank", r, out)
	}
	// Output:
	// rank 0 [0 10 10 20 20 20]
	// rank 1 [1 11 11 21 21 21]
	// rank 2 [2 12 12 22 22 22]
}

// Split makes subgroups: here the even and the odd ranks of four, each
// ordered by descending parent rank, sum their parent ranks apart.
func ExampleGroup_Split() {
	groups, err := local.New(4, local.Options{})
	if err != nil {
		panic(err)
	}
	sums := make([]string, 4)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			ctx := context.Background()
			sub, err := g.Split(ctx, r%2, -r)
			if err != nil {
				panic(err)
			}
			defer sub.Close()
			x := []int64{int64(r)}
			if err := sub.AllReduce(ctx, pg.Int64s(x), pg.Op(pg.Sum)).Wait(ctx); err != nil {
				panic(err)
			}
			sums[r] = fmt.Sprintf("parent rank %d is rank %d of %d; sum %d", r, sub.Rank(), sub.Size(), x[0])
		})
	}
	wg.Wait()
	for _, g := range groups {
		_ = g.Close()
	}
	for _, s := range sums {
		fmt.Println(s)
	}
	// Output:
	// parent rank 0 is rank 1 of 2; sum 2
	// parent rank 1 is rank 1 of 2; sum 4
	// parent rank 2 is rank 0 of 2; sum 2
	// parent rank 3 is rank 0 of 2; sum 4
}
