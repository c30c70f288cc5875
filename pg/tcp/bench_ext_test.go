package tcp

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// BenchmarkSendRecv measures point-to-point messages between two ranks
// on loopback TCP (shared memory carries no Send or Recv), with the ack
// that finishes each Send:
//
//   - oneway: rank 0 sends, rank 1 receives, Send and Recv issued
//     together;
//   - ring: nccl-tests' sendrecv (bench/allreduce --op sendrecv), every
//     rank sends to the other and receives from it at once.
//
// 64 B and 4 KiB measure latency, 64 MiB bandwidth. vcsw/op counts the
// hand-offs between goroutines on parked threads (both ranks together);
// BenchmarkLoopbackPingPong is the floor in the same run. On the shared
// 2-core development machine (2026-11-26) oneway/64B took 36-51 µs, all
// of it CPU (cpu_us/op about equal), against 20 µs for the floor; in a
// CPU profile the writev and read system calls of loopback TCP were half
// of it and the scheduler (netpoll, futex wake-ups) most of the rest.
//
//	go test -run '^$' -bench 'SendRecv|PingPong' ./pg/tcp
func BenchmarkSendRecv(b *testing.B) {
	for _, mode := range []string{"oneway", "ring"} {
		for _, bytes := range []int{64, 4 << 10, 64 << 20} {
			b.Run(mode+"/"+sizeName(bytes), func(b *testing.B) {
				gs := newGroups(b, 2, time.Minute, nil)
				bufs := [][2]pg.Tensor{
					{pg.NewTensor(pg.Uint8, bytes), pg.NewTensor(pg.Uint8, bytes)},
					{pg.NewTensor(pg.Uint8, bytes), pg.NewTensor(pg.Uint8, bytes)},
				}
				ctx := context.Background()
				step := func(r int, g *Group) error {
					peer := 1 - r
					switch {
					case mode == "ring":
						s := g.Send(ctx, bufs[r][0], peer, 0)
						v := g.Recv(ctx, bufs[r][1], peer, 0)
						return pg.WaitAll(ctx, s, v)
					case r == 0:
						return g.Send(ctx, bufs[r][0], peer, 0).Wait(ctx)
					default:
						return g.Recv(ctx, bufs[r][1], peer, 0).Wait(ctx)
					}
				}
				run := func(iters int) []error {
					return each(gs, func(r int, g *Group) error {
						for range iters {
							if err := step(r, g); err != nil {
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
}

// BenchmarkLoopbackPingPong is the floor BenchmarkSendRecv's oneway/64B
// is measured against: a goroutine writes a 20-byte header and 64 bytes
// on a loopback TCP connection, a goroutine on the other end reads them
// and answers with a 20-byte header and 8 bytes (an ack's size), which
// the first reads: one message and its ack, with no framing, matching,
// queue or Future.
func BenchmarkLoopbackPingPong(b *testing.B) {
	c1, c2 := loopbackPair(b)
	const msg, ack = 20 + 64, 20 + 8
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, msg)
		for range b.N {
			if _, err := io.ReadFull(c2, buf); err != nil {
				done <- err
				return
			}
			if _, err := c2.Write(buf[:ack]); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, msg)
	sw := startSwitches()
	cpu := cpuTime()
	b.ResetTimer()
	for range b.N {
		if _, err := c1.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c1, buf[:ack]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu_us/op")
	sw.report(b)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/op")
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
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/op")
}
