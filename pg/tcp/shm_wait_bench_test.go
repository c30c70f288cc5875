package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// BenchmarkWaitCPU measures what a rank spends while it waits in an
// allreduce for a peer that arrives shmWaitLate later: rank 1 sleeps,
// then joins a 4 KiB allreduce that rank 0 entered at once. The process's
// CPU time per op, over the wait's length, is the share of a core the
// waiting rank burns (the sleeping rank uses none). It runs over shared
// memory (spin, then futex waits) and over TCP (the goroutine parks in
// the netpoller) in the same run, so the two compare.
//
//	go test -run '^$' -bench WaitCPU ./pg/tcp
func BenchmarkWaitCPU(b *testing.B) {
	for _, tc := range []struct {
		name  string
		tweak func(*Options)
	}{
		{"shm", nil},
		{"tcp", func(o *Options) { o.NoSharedMemory = true }},
	} {
		b.Run(tc.name, func(b *testing.B) { benchWaitCPU(b, tc.tweak) })
	}
}

const shmWaitLate = 5 * time.Millisecond

func benchWaitCPU(b *testing.B, tweak func(*Options)) {
	gs := newGroups(b, 2, time.Minute, tweak)
	if want := tweak == nil && shm.Supported; (gs[0].shm != nil) != want {
		b.Fatalf("shared memory in use = %v, want %v", gs[0].shm != nil, want)
	}
	bufs := []pg.Tensor{pg.NewTensor(pg.Float32, 1024), pg.NewTensor(pg.Float32, 1024)}
	ctx := context.Background()
	allreduce := func(r int) error { return gs[r].AllReduce(ctx, bufs[r], pg.Op(pg.Sum)).Wait(ctx) }
	for r, err := range each(gs, func(r int, _ *Group) error { return allreduce(r) }) {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	cpu := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		errs := each(gs, func(r int, _ *Group) error {
			if r == 1 {
				time.Sleep(shmWaitLate)
			}
			return allreduce(r)
		})
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	b.StopTimer()
	used := (cpuTime() - cpu) / time.Duration(b.N)
	b.ReportMetric(float64(used.Microseconds()), "cpu_us/op")
	b.ReportMetric(100*used.Seconds()/shmWaitLate.Seconds(), "core_%_while_waiting")
}
