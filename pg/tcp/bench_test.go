package tcp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// BenchmarkAllReduce measures a float32 SUM allreduce over two ranks in
// this process, on loopback: 4 KiB (recursive doubling, latency) and
// 64 MiB (the ring, bandwidth). It reports busbw as nccl-tests defines it
// (algbw * 2(n-1)/n, which for n = 2 equals algbw = SetBytes / time).
func BenchmarkAllReduce(b *testing.B) {
	for _, bytes := range []int{4 << 10, 64 << 20} {
		b.Run(fmt.Sprintf("n=2/float32/%s", sizeName(bytes)), func(b *testing.B) {
			benchAllReduce(b, 2, bytes, nil)
		})
	}
}

func benchAllReduce(b *testing.B, n, bytes int, tweak func(*Options)) {
	gs := newGroups(b, n, time.Minute, tweak)
	bufs := make([]pg.Tensor, n)
	for r := range bufs {
		bufs[r] = pg.NewTensor(pg.Float32, bytes/4)
	}
	ctx := context.Background()
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	errs := each(gs, func(r int, g *Group) error {
		for range b.N {
			if err := g.AllReduce(ctx, bufs[r], pg.Op(pg.Sum)).Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	})
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	algbw := float64(bytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(algbw*2*float64(n-1)/float64(n), "busbw_GB/s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/op")
}

func sizeName(bytes int) string {
	switch {
	case bytes >= 1<<20:
		return fmt.Sprintf("%dMiB", bytes>>20)
	case bytes >= 1<<10:
		return fmt.Sprintf("%dKiB", bytes>>10)
	}
	return fmt.Sprintf("%dB", bytes)
}
