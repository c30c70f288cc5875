package instrument_test

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/local"
	"github.com/prometheus/client_golang/prometheus"
)

func Example() {
	groups, _ := local.New(1, local.Options{})
	reg := prometheus.NewRegistry()
	g, err := instrument.Wrap(groups[0], reg)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := g.AllReduce(ctx, pg.Float32s([]float32{1, 2, 3}), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		panic(err)
	}
	g.Close() // closes the local group, after its completion hook has seen the allreduce
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[1].GetValue() != "allreduce" {
				continue
			}
			if h := m.GetHistogram(); h != nil {
				fmt.Println(mf.GetName(), "count", h.GetSampleCount())
			} else {
				fmt.Println(mf.GetName(), m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// ddp_collective_bytes_total 12
	// ddp_collective_queue_seconds count 1
	// ddp_collective_seconds count 1
}

// A Counter counts what a hook hands over, also through the abilities
// the hook finds with pg.As.
func ExampleCount() {
	groups, _ := local.New(1, local.Options{})
	c := instrument.Count(groups[0])
	defer c.Close()
	ctx := context.Background()
	var r pg.Rooted
	if !pg.As(c, &r) {
		panic("no Reduce")
	}
	if err := r.Reduce(ctx, pg.Float32s([]float32{1, 2, 3}), 0, pg.Op(pg.Sum)).Wait(ctx); err != nil {
		panic(err)
	}
	fmt.Println(c.Bytes(), "bytes in", c.Calls(), "call")
	// Output: 12 bytes in 1 call
}
