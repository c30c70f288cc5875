package flight_test

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/local"
)

// A group behind a Recorder records what it issues; a Snapshot (or Dump,
// or DumpFile) shows it in torch's layout.
func Example() {
	groups, err := local.New(1, local.Options{})
	if err != nil {
		panic(err)
	}
	g, err := flight.Wrap(groups[0], flight.Options{})
	if err != nil {
		panic(err)
	}
	defer g.Close() // closes the local group too
	ctx := context.Background()
	if err := g.AllReduce(ctx, pg.Float32s([]float32{1, 2, 3}), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		panic(err)
	}
	if err := g.Barrier(ctx).Wait(ctx); err != nil {
		panic(err)
	}
	for _, e := range g.Snapshot().Entries {
		fmt.Println(e.CollectiveSeqID, e.ProfilingName, e.InputSizes, e.InputDtypes, e.State)
	}
	// Output:
	// 1 nccl:all_reduce [[3]] [Float] completed
	// 2 nccl:all_reduce_barrier [[1]] [Float] completed
}
