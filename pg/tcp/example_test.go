package tcp_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// Two ranks in one process, each with its own TCP group on loopback,
// meet through an in-memory store and average their gradients. In a real
// job every rank is a process and the store is a store.TCPStore.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	secret := []byte("example-job-secret-0123456789abc")

	const size = 2
	groups := make([]*tcp.Group, size)
	grads := [size][]float32{{1, 10, 100}, {3, 30, 300}}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() {
			g, err := tcp.New(ctx, st, tcp.Options{
				Rank: rank, Size: size, Secret: secret,
				ListenAddr: "127.0.0.1:0", Timeout: time.Minute,
			})
			if err != nil {
				errs[rank] = err
				return
			}
			groups[rank] = g
			errs[rank] = g.AllReduce(ctx, pg.Float32s(grads[rank]), pg.Op(pg.Avg)).Wait(ctx)
		})
	}
	wg.Wait()
	for rank, g := range groups {
		if g != nil {
			g.Close()
		}
		fmt.Println("rank", rank, grads[rank], errs[rank])
	}
	// Output:
	// rank 0 [2 20 200] <nil>
	// rank 1 [2 20 200] <nil>
}
