package averaging_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/goddp/ddp/averaging"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Two ranks whose parameters drifted apart (local SGD) average them every
// second step after a warm-up of two steps: steps 2 and 4 here.
func ExamplePeriodicModelAverager() {
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
	weights := [][]float32{{1, 2}, {3, 6}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var log []string
	for r, g := range groups {
		wg.Go(func() {
			avg, _ := averaging.NewPeriodicModelAverager(g, averaging.PeriodicOptions{Period: 2, WarmupSteps: 2})
			for step := range 5 {
				weights[r][0] += float32(r) // each rank's own optimizer step
				did, err := avg.AverageParameters(context.Background(), []pg.Tensor{pg.Float32s(weights[r])})
				if r == 0 && (did || err != nil) {
					mu.Lock()
					log = append(log, fmt.Sprintf("step %d: averaged, rank 0 holds %v (%v)", step, weights[r], err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for _, l := range log {
		fmt.Println(l)
	}
	fmt.Println("replicas equal:", fmt.Sprint(weights[0]) == fmt.Sprint(weights[1]))
	// Output:
	// step 2: averaged, rank 0 holds [3.5 4] (<nil>)
	// step 4: averaged, rank 0 holds [4.5 4] (<nil>)
	// replicas equal: true
}
