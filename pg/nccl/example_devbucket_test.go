package nccl_test

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/nccltest"
)

// A device bucket on the binding's test double, which reports NCCL 2.28:
// allocated with ncclMemAlloc, registered as a symmetric window, filled
// through the copy stream, reduced, and read back once.
func ExampleGroup_NewDeviceBucket() {
	w, err := nccltest.NewWorld(1, nccltest.Options{})
	if err != nil {
		panic(err)
	}
	defer w.Close()
	g := w.Groups[0]
	ctx := context.Background()
	b, err := g.NewDeviceBucket(ctx, pg.Float32, 4, true)
	if err != nil {
		panic(err)
	}
	defer b.Close()
	_ = b.Upload(0, pg.Float32s([]float32{1, 2}))
	_ = b.Upload(2, pg.Float32s([]float32{3, 4}))
	_ = b.Seal() // the allreduce below waits for the uploads on the device
	if err := g.AllReduce(ctx, b.Tensor(), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		panic(err)
	}
	out := make([]float32, 4)
	if err := b.Download(ctx, 0, pg.Float32s(out)); err != nil {
		panic(err)
	}
	fmt.Println(b.Registration(), out)
	// Output: window [1 2 3 4]
}
