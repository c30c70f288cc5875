package nccltest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/nccl/nccltest"
)

// Two ranks of NCCL Groups on a machine without a GPU: an allreduce of
// host tensors, and a device bucket, which the double, as NCCL 2.28,
// registers as a symmetric window.
func ExampleNewWorld() {
	w, err := nccltest.NewWorld(2, nccltest.Options{})
	if err != nil {
		panic(err)
	}
	defer w.Close()
	ctx := context.Background()
	xs := [][]float32{{1, 2}, {10, 20}}
	ws := make([]pg.Work, 2)
	for r, g := range w.Groups {
		ws[r] = g.AllReduce(ctx, pg.Float32s(xs[r]), pg.Op(pg.Sum))
	}
	for _, wk := range ws {
		if err := wk.Wait(ctx); err != nil {
			panic(err)
		}
	}
	// Window registration is collective: every rank makes its bucket.
	buckets, errs := make([]backend.DeviceBucket, 2), make([]error, 2)
	var wg sync.WaitGroup
	for r, g := range w.Groups {
		wg.Go(func() { buckets[r], errs[r] = g.NewDeviceBucket(ctx, pg.Float32, 4, true) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		panic(err)
	}
	live, made := w.Registrations(0)
	fmt.Println(xs[0], xs[1], buckets[0].Registration(), live, made)
	for _, b := range buckets {
		_ = b.Close()
	}
	// Output: [11 22] [11 22] window 1 1
}
