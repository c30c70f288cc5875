package backend_test

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// A backend's AllReduce checks its arguments before it takes a sequence
// number, so a bad call fails on its own rank with a finished Work, and
// reports every collective it finishes to the completion hooks.
func Example() {
	var hooks backend.Completions
	defer hooks.Close()
	var seq uint64
	allReduce := func(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
		if err := backend.CheckContext(ctx); err != nil {
			return pg.Completed(err)
		}
		if err := backend.CheckAllReduce(t, op); err != nil {
			return pg.Completed(err)
		}
		seq++
		f := pg.NewSeqFuture(seq)
		f.Complete(nil) // a group of one rank: the sum is t itself
		if hooks.Active() {
			hooks.Deliver(pg.WorkInfo{Op: pg.OpAllReduce, Seq: seq, Dtype: t.Dtype})
		}
		return f
	}
	done := make(chan pg.WorkInfo, 1)
	hooks.Register(func(w pg.WorkInfo) { done <- w })

	ctx := context.Background()
	fmt.Println(allReduce(ctx, pg.Float32s([]float32{1, 2}), pg.Op(pg.Band)).Wait(ctx))
	w := allReduce(ctx, pg.Float32s([]float32{1, 2}), pg.Op(pg.Sum))
	fmt.Println(w.Wait(ctx), w.Seq())
	info := <-done
	fmt.Println(info.Op, info.Seq, info.Dtype)
	// Output:
	// invalid argument: BAND needs an integer dtype, got float32
	// <nil> 1
	// allreduce 1 float32
}
