package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
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
	run := func(iters int) []error {
		return each(gs, func(r int, g *Group) error {
			for range iters {
				if err := g.AllReduce(ctx, bufs[r], pg.Op(pg.Sum)).Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	run(2) // warm up: pools fill, socket buffers grow
	runtime.GC()
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	cpu := cpuTime()
	sw := startSwitches()
	b.ResetTimer()
	errs := run(b.N)
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu_us/op")
	sw.report(b)
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

// BenchmarkLoopbackReference moves what a 64 MiB allreduce on two ranks
// moves, 64 MiB each way at once over one loopback TCP connection, with
// no framing and no reduction: the ceiling the allreduce is measured
// against in the same run (the machine is shared, so absolute figures
// drift).
func BenchmarkLoopbackReference(b *testing.B) {
	const bytes, chunk = 64 << 20, 2 << 20
	c1, c2 := loopbackPair(b)
	b.SetBytes(bytes)
	runtime.GC()
	cpu := cpuTime()
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range []net.Conn{c1, c2} {
		wg.Go(func() {
			src := make([]byte, chunk)
			for range b.N * bytes / chunk {
				if _, err := c.Write(src); err != nil {
					return
				}
			}
		})
		wg.Go(func() {
			dst := make([]byte, bytes)
			for range b.N {
				if _, err := io.ReadFull(c, dst); err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu_us/op")
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "busbw_GB/s")
}

// BenchmarkBarrier times Barrier on 2 ranks through shared memory and
// over loopback TCP, in the same run.
//
//	go test -run '^$' -bench Barrier ./pg/tcp
//
// loopbackPair is two ends of one loopback TCP connection, closed when
// the benchmark ends: the floor the Loopback benchmarks measure pg/tcp
// against.
func loopbackPair(b *testing.B) (net.Conn, net.Conn) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	c2 := <-accepted
	b.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}

func BenchmarkBarrier(b *testing.B) {
	for _, tc := range []struct {
		name  string
		tweak func(*Options)
	}{
		{"shm", nil},
		{"tcp", func(o *Options) { o.NoSharedMemory = true }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			gs := newGroups(b, 2, time.Minute, tc.tweak)
			ctx := context.Background()
			sw := startSwitches()
			b.ResetTimer()
			errs := each(gs, func(_ int, g *Group) error {
				for range b.N {
					if err := g.Barrier(ctx).Wait(ctx); err != nil {
						return err
					}
				}
				return nil
			})
			b.StopTimer()
			sw.report(b)
			for r, err := range errs {
				if err != nil {
					b.Fatalf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// switchCount is the process's context switches when a benchmark began.
type switchCount struct{ v, iv int64 }

func startSwitches() switchCount {
	v, iv := switches()
	return switchCount{v, iv}
}

// report reports the context switches per op since s: vcsw/op counts the
// futex sleeps and parked-thread wake-ups that hand-offs cost, for all the
// ranks in this process together.
func (s switchCount) report(b *testing.B) {
	v, iv := switches()
	b.ReportMetric(float64(v-s.v)/float64(b.N), "vcsw/op")
	b.ReportMetric(float64(iv-s.iv)/float64(b.N), "ivcsw/op")
}
