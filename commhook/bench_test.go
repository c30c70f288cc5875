package commhook_test

import (
	"context"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// The 784-512-512-512-10 MLP's parameters in the reducer's buckets after
// the rebuild (bench/ddpstep prints them): the last two layers, then the
// first two. Biases are 1×out, as Gorgonia keeps them.
var benchPlan = [][]layer{
	{{1, 10}, {512, 10}, {1, 512}, {512, 512}},
	{{1, 512}, {512, 512}, {1, 512}, {784, 512}},
}

// BenchmarkHookCPU is the CPU cost of each hook's compression and
// decompression: one step of the MLP's buckets on a group of one rank
// whose allreduce does nothing (a sum over one rank is the identity), so
// only the hook's own work is timed. MB/s is of float32 gradients.
func BenchmarkHookCPU(b *testing.B) {
	opts := commhook.DefaultPowerSGDOptions()
	opts.StartIter = 2
	for _, c := range []struct {
		name string
		make func() commhook.Hook
	}{
		{"allreduce", func() commhook.Hook { return commhook.Allreduce{} }},
		{"fp16", commhook.FP16Compress},
		{"bf16", commhook.BF16Compress},
		{"powersgd-rank1", func() commhook.Hook { h, _ := commhook.NewPowerSGD(opts); return h }},
		{"powersgd-rank4", func() commhook.Hook {
			o := opts
			o.MatrixApproximationRank = 4
			h, _ := commhook.NewPowerSGD(o)
			return h
		}},
		{"batched-powersgd-rank1", func() commhook.Hook { h, _ := commhook.NewBatchedPowerSGD(opts); return h }},
	} {
		b.Run(c.name, func(b *testing.B) {
			g := solo{localGroups(b, 1)[0]}
			h := c.make()
			bs := newBuckets(pg.Float32, benchPlan)
			randomGrads(bs, 1, 0, 1e-2)
			ctx := testCtx(b)
			bytes := 0
			for _, gb := range bs {
				bytes += len(gb.Buffer.Data)
			}
			for range 3 { // past StartIter, and warm
				if err := iterate(ctx, h, g, bs); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(bytes))
			for b.Loop() {
				if err := iterate(ctx, h, g, bs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// solo is a group of one rank whose allreduce costs nothing.
type solo struct{ pg.ProcessGroup }

func (solo) AllReduce(context.Context, pg.Tensor, pg.ReduceOp) pg.Work { return pg.Completed(nil) }
