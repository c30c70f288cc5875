package ft_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goddp/ddp/ft"
)

// Two replica groups ask a lighthouse for a quorum over HTTP: replica_b
// is a step behind, so it heals from replica_a before the step.
func Example() {
	secret := []byte("0123456789abcdef0123456789abcdef") // GODDP_SECRET
	srv, err := ft.NewServer(context.Background(), "127.0.0.1:0", secret, ft.DefaultOptions(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := map[string]int64{"replica_a": 8, "replica_b": 7}
	results := map[string]ft.Results{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, step := range steps {
		wg.Go(func() {
			c, err := ft.NewClient(srv.Addr(), secret, id, ft.ClientOptions{})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer c.Close()
			q, err := c.Quorum(ctx, ft.Member{Address: "manager_" + id, Step: step, WorldSize: 1})
			if err != nil {
				fmt.Println(err)
				return
			}
			r, err := q.Results(id, 0, true)
			if err != nil {
				fmt.Println(err)
				return
			}
			mu.Lock()
			results[id] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, id := range []string{"replica_a", "replica_b"} {
		r := results[id]
		fmt.Printf("%s: quorum %d rank %d/%d max_step %d heal %t from %q serves %v\n", id, r.QuorumID,
			r.ReplicaRank, r.ReplicaWorldSize, r.MaxStep, r.Heal, r.RecoverSrcAddr, r.RecoverDstRanks)
	}
	// Output:
	// replica_a: quorum 1 rank 0/2 max_step 8 heal false from "" serves [1]
	// replica_b: quorum 1 rank 1/2 max_step 8 heal true from "manager_replica_a" serves []
}
