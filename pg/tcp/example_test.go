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

// Four ranks split into pairs by parity; in each pair, the higher rank
// sends the lower one a message, and each pair sums its ranks.
func ExampleGroup_Split() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	secret := []byte("example-job-secret-0123456789abc")

	const size = 4
	out := make([]string, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() {
			g, err := tcp.New(ctx, st, tcp.Options{Rank: rank, Size: size, Secret: secret, ListenAddr: "127.0.0.1:0"})
			if err != nil {
				out[rank] = err.Error()
				return
			}
			defer g.Close()
			sub, err := g.Split(ctx, rank%2, rank) // {0, 2} and {1, 3}
			if err != nil {
				out[rank] = err.Error()
				return
			}
			defer sub.Close()
			p2p := sub.(pg.PointToPoint)
			msg := []int64{int64(rank)}
			if sub.Rank() == 1 {
				err = p2p.Send(ctx, pg.Int64s(msg), 0, 7).Wait(ctx)
			} else {
				err = p2p.Recv(ctx, pg.Int64s(msg), 1, 7).Wait(ctx)
			}
			sum := []int64{int64(rank)}
			if err == nil {
				err = sub.AllReduce(ctx, pg.Int64s(sum), pg.Op(pg.Sum)).Wait(ctx)
			}
			out[rank] = fmt.Sprintf("rank %d: subgroup rank %d of %d, message %d, sum %d, %v", rank, sub.Rank(), sub.Size(),
				msg[0], sum[0], err)
		})
	}
	wg.Wait()
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// rank 0: subgroup rank 0 of 2, message 2, sum 2, <nil>
	// rank 1: subgroup rank 0 of 2, message 3, sum 4, <nil>
	// rank 2: subgroup rank 1 of 2, message 2, sum 2, <nil>
	// rank 3: subgroup rank 1 of 2, message 3, sum 4, <nil>
}

// Buffers from NewHostBuffer lie in shared memory the ranks of a host have
// mapped, so an AllReduce on them reads and writes the peers' buffers in
// place instead of copying through the segments (on Linux; elsewhere, or
// without shared memory, NewHostBuffer fails and the heap is used).
func ExampleGroup_NewHostBuffer() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	secret := []byte("example-job-secret-0123456789abc")

	const size, n = 2, 1 << 16 // 256 KiB of float32: past the small-message path
	groups := make([]*tcp.Group, size)
	sums := make([]float32, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() {
			g, err := tcp.New(ctx, st,
				tcp.Options{Rank: rank, Size: size, Secret: secret, ListenAddr: "127.0.0.1:0", Timeout: time.Minute})
			if err != nil {
				errs[rank] = err
				return
			}
			groups[rank] = g
			x := pg.NewTensor(pg.Float32, n)
			if b, err := g.NewHostBuffer(pg.Float32, n); err == nil {
				defer b.Close()
				x = b.Tensor()
			}
			v := pg.View[float32](x)
			for i := range v {
				v[i] = float32(rank + 1)
			}
			errs[rank] = g.AllReduce(ctx, x, pg.Op(pg.Sum)).Wait(ctx)
			sums[rank] = v[n-1]
		})
	}
	wg.Wait()
	for rank, g := range groups {
		if g != nil {
			g.Close()
		}
		fmt.Println("rank", rank, sums[rank], errs[rank])
	}
	// Output:
	// rank 0 3 <nil>
	// rank 1 3 <nil>
}
