package flight_test

import (
	"context"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/local"
)

// BenchmarkAllReduce measures what recording costs per collective: a
// 1-rank local group's allreduce of 256 float32s, waited on, unwrapped
// and behind a Recorder, in the same run (compare the two as a ratio).
// One rank keeps the collective itself as cheap as a collective gets,
// so the ratio is the recorder's worst case.
func BenchmarkAllReduce(b *testing.B) {
	for _, wrapped := range []bool{false, true} {
		name := "unwrapped"
		if wrapped {
			name = "flight"
		}
		b.Run(name, func(b *testing.B) {
			groups, err := local.New(1, local.Options{})
			if err != nil {
				b.Fatal(err)
			}
			var g pg.ProcessGroup = groups[0]
			if wrapped {
				if g, err = flight.Wrap(g, flight.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			defer g.Close()
			ctx := context.Background()
			t := pg.Float32s(make([]float32, 256))
			b.ReportAllocs()
			for b.Loop() {
				if err := g.AllReduce(ctx, t, pg.Op(pg.Sum)).Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// completed is a group whose allreduce has finished when it returns,
// so BenchmarkRecord times the recorder alone.
type completed struct{ pg.ProcessGroup }

func (completed) AllReduce(context.Context, pg.Tensor, pg.ReduceOp) pg.Work { return pg.Completed(nil) }
func (completed) Rank() int                                                 { return 0 }
func (completed) Size() int                                                 { return 1 }

// BenchmarkRecord is the recorder's own cost per collective: an
// allreduce on a group that does nothing, unwrapped and recorded.
func BenchmarkRecord(b *testing.B) {
	for _, wrapped := range []bool{false, true} {
		name := "unwrapped"
		if wrapped {
			name = "flight"
		}
		b.Run(name, func(b *testing.B) {
			var g pg.ProcessGroup = completed{}
			if wrapped {
				var err error
				if g, err = flight.Wrap(g, flight.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			t := pg.Float32s(make([]float32, 256))
			b.ReportAllocs()
			for b.Loop() {
				if err := g.AllReduce(ctx, t, pg.Op(pg.Sum)).Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
