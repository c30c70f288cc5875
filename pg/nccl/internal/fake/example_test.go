package fake_test

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
	"github.com/goddp/ddp/pg/nccl/internal/fake"
)

// Two ranks sum a vector in fake device memory with ncclAllReduce, as a
// Group would: upload, collective, event, download.
func ExampleNewWorld() {
	bs, cleanup, err := fake.NewWorld(2, fake.Options{})
	if err != nil {
		panic(err)
	}
	defer cleanup()
	ctx := context.Background()
	outs := make([][]float32, 2)
	done := make(chan error, 2)
	for r, b := range bs {
		go func() {
			p := b.Alloc(8)
			_ = b.H2D(p, pg.Float32s([]float32{float32(r), 10}).Data)
			_ = b.AllReduce(p, p, 2, binding.DataType(pg.Float32), libnccl.Sum)
			outs[r] = make([]float32, 2)
			_ = b.D2H(pg.Float32s(outs[r]).Data, p)
			done <- b.Synchronize(ctx)
		}()
	}
	for range bs {
		if err := <-done; err != nil {
			panic(err)
		}
	}
	for _, b := range bs {
		_ = b.Close(ctx)
	}
	fmt.Println(outs[0], outs[1], bs[0].Calls())
	// Output: [1 20] [1 20] 1
}
