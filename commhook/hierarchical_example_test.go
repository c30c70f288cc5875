package commhook_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Four ranks on two simulated hosts, labelled "a" and "b": each host
// reduces into its leader, the two leaders allreduce, and each leader
// broadcasts the average back to its host.
func ExampleNewHierarchical() {
	groups, _ := local.New(4, local.Options{})
	ctx := context.Background()
	grads := [][]float32{{1, 10}, {2, 20}, {3, 30}, {4, 40}}
	hosts := []string{"a", "a", "b", "b"}
	layout := make([][]int, 4)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			h, _ := commhook.NewHierarchical(commhook.HierarchicalOptions{Host: hosts[r]})
			defer h.Close()
			b := &commhook.GradBucket{Buffer: pg.Float32s(grads[r]), IsLast: true}
			if err := h.Run(ctx, g, b).Wait(ctx); err != nil {
				fmt.Println(err)
			}
			layout[r] = h.HostLayout()
		})
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	fmt.Println("hosts:", layout[0])
	fmt.Println(grads)
	// Output:
	// hosts: [0 0 1 1]
	// [[2.5 25] [2.5 25] [2.5 25] [2.5 25]]
}
