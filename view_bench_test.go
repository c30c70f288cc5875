package ddp

import (
	"context"
	"testing"

	"github.com/goddp/ddp/reducer"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BenchmarkBucketView is BenchmarkMarkReadyHook's iteration (1 rank, a
// hook that communicates nothing, the MLP: 3.7 MB of float32
// gradients) through DDP's hook function, copying (copy) and with
// GradientAsBucketView (view): the reducer's copies in and back against
// the one copy that places each fresh Gorgonia gradient in its bucket
// view. Compare the two sub-benchmarks of one run.
func BenchmarkBucketView(b *testing.B) {
	for _, view := range []bool{false, true} {
		name := "copy"
		if view {
			name = "view"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			m := benchMLP(b, 1)
			d, err := Wrap(ctx, world(b, 1)[0], m.params, Options{Hook: newDoneHook(), GradientAsBucketView: view})
			if err != nil {
				b.Fatal(err)
			}
			values := make([]G.Value, len(m.params))
			var bytes int64
			for i, p := range m.params {
				values[i] = tensor.New(tensor.WithShape(p.Shape()...),
					tensor.WithBacking(uniform[float32](p.Shape().TotalSize(), 1, uint64(i), 1)))
				bytes += int64(4 * p.Shape().TotalSize())
			}
			hook := func(i int, v G.Value) error { return d.onGradient(i, v) }
			if view {
				hook = func(i int, v G.Value) error { _, err := d.placeGradient(i, v); return err }
			}
			iteration := func() {
				if err := d.r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
					b.Fatal(err)
				}
				for i := len(values) - 1; i >= 0; i-- {
					if err := hook(i, values[i]); err != nil {
						b.Fatal(err)
					}
				}
				if err := d.r.Finalize(ctx); err != nil {
					b.Fatal(err)
				}
			}
			for range 3 { // past the rebuild
				iteration()
			}
			before := d.r.CopyStats()
			placed := d.PlacedBytes()
			b.SetBytes(bytes)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				iteration()
				n++
			}
			after := d.r.CopyStats()
			b.ReportMetric(float64(after.In-before.In+after.Out-before.Out+d.PlacedBytes()-placed)/float64(n), "copied-B/op")
		})
	}
}
