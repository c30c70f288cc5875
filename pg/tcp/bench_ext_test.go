package tcp

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// BenchmarkSendRecv measures one message from rank 0 to rank 1 on
// loopback, Send and Recv issued together: 4 KiB (latency, including the
// ack) and 64 MiB (bandwidth). Compare with BenchmarkLoopbackReference,
// which moves 64 MiB both ways at once.
func BenchmarkSendRecv(b *testing.B) {
	for _, bytes := range []int{4 << 10, 64 << 20} {
		b.Run(sizeName(bytes), func(b *testing.B) {
			gs := newGroups(b, 2, time.Minute, nil)
			bufs := []pg.Tensor{pg.NewTensor(pg.Uint8, bytes), pg.NewTensor(pg.Uint8, bytes)}
			ctx := context.Background()
			run := func(iters int) []error {
				return each(gs, func(r int, g *Group) error {
					for range iters {
						var w pg.Work
						if r == 0 {
							w = g.Send(ctx, bufs[0], 1, 0)
						} else {
							w = g.Recv(ctx, bufs[1], 0, 0)
						}
						if err := w.Wait(ctx); err != nil {
							return err
						}
					}
					return nil
				})
			}
			benchRun(b, bytes, run)
		})
	}
}

// BenchmarkAllToAll measures an equal-split alltoall over four ranks in
// this process, of 4 KiB and 16 MiB per rank.
func BenchmarkAllToAll(b *testing.B) {
	const n = 4
	for _, bytes := range []int{4 << 10, 16 << 20} {
		b.Run(fmt.Sprintf("n=%d/%s", n, sizeName(bytes)), func(b *testing.B) {
			gs := newGroups(b, n, time.Minute, nil)
			ins, outs := make([]pg.Tensor, n), make([]pg.Tensor, n)
			for r := range n {
				ins[r], outs[r] = pg.NewTensor(pg.Float32, bytes/4), pg.NewTensor(pg.Float32, bytes/4)
			}
			ctx := context.Background()
			run := func(iters int) []error {
				return each(gs, func(r int, g *Group) error {
					for range iters {
						if err := g.AllToAll(ctx, outs[r], ins[r], nil, nil).Wait(ctx); err != nil {
							return err
						}
					}
					return nil
				})
			}
			benchRun(b, bytes, run)
		})
	}
}

func benchRun(b *testing.B, bytes int, run func(iters int) []error) {
	run(2)
	runtime.GC()
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	cpu := cpuTime()
	b.ResetTimer()
	errs := run(b.N)
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu_us/op")
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/op")
}
