package local_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// Note [Reading the benchmarks]
//
// An in-place allreduce of S bytes on each of N ranks that share memory
// must read every rank's buffer and write the result back to every rank's
// buffer: at least 2*N*S bytes through memory, so T >= 2*N*S/B_mem. Both
// benchmarks below count their MB/s in those bytes moved: BenchmarkCopy's
// is B_mem itself (a copy of S bytes moves 2*S), and BenchmarkAllReduce's
// is 2*N*S/T. Their ratio is therefore T_bound/T: at least 0.5 means the
// allreduce is within 2x of the memory-bandwidth bound. Take B_mem from
// the faster of the copy variants.

const benchBytes = 64 << 20

// BenchmarkAllReduce is 4 ranks summing 64 MiB of float32 each. Besides
// MB/s (see the note) it reports the nccl-tests algbw and busbw.
func BenchmarkAllReduce(b *testing.B) {
	const n = 4
	ctx := context.Background()
	groups, err := local.New(n, local.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			_ = g.Close()
		}
	}()
	bufs := make([]pg.Tensor, n)
	for r := range bufs {
		bufs[r] = pg.NewTensor(pg.Float32, benchBytes/4) // zeros: the sums never overflow
		fault(bufs[r].Data)
	}
	works := make([]pg.Work, n)
	b.SetBytes(2 * n * benchBytes)
	for b.Loop() {
		for r, g := range groups {
			works[r] = g.AllReduce(ctx, bufs[r], pg.Op(pg.Sum))
		}
		if err := pg.WaitAll(ctx, works...); err != nil {
			b.Fatal(err)
		}
	}
	algbw := float64(benchBytes) * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(algbw, "algbw_GB/s")
	b.ReportMetric(algbw*2*(n-1)/n, "busbw_GB/s")
}

// BenchmarkAllToAll is 4 ranks exchanging equal chunks of 64 MiB of
// float32 each. Every byte is read once from its sender's input and
// written once to its receiver's output, so its MB/s, counted as 2*N*S
// bytes moved, compares with BenchmarkCopy's directly.
func BenchmarkAllToAll(b *testing.B) {
	const n = 4
	ctx := context.Background()
	groups, err := local.New(n, local.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			_ = g.Close()
		}
	}()
	ins, outs := make([]pg.Tensor, n), make([]pg.Tensor, n)
	for r := range ins {
		ins[r], outs[r] = pg.NewTensor(pg.Float32, benchBytes/4), pg.NewTensor(pg.Float32, benchBytes/4)
		fault(ins[r].Data)
		fault(outs[r].Data)
	}
	works := make([]pg.Work, n)
	b.SetBytes(2 * n * benchBytes)
	for b.Loop() {
		for r, g := range groups {
			works[r] = g.AllToAll(ctx, outs[r], ins[r], nil, nil)
		}
		if err := pg.WaitAll(ctx, works...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopy is the memory-bandwidth reference: a plain copy of 64 MiB
// by one goroutine, and split across GOMAXPROCS goroutines.
func BenchmarkCopy(b *testing.B) {
	src, dst := make([]byte, benchBytes), make([]byte, benchBytes)
	fault(src)
	fault(dst)
	for _, threads := range copyThreads() {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			b.SetBytes(2 * benchBytes)
			for b.Loop() {
				parallelCopy(dst, src, threads)
			}
		})
	}
}

// fault touches every page of b, so that no benchmark times the kernel
// handing out fresh pages.
func fault(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
}

func copyThreads() []int {
	if p := runtime.GOMAXPROCS(0); p > 1 {
		return []int{1, p}
	}
	return []int{1}
}

// parallelCopy copies src to dst in threads equal parts at once.
func parallelCopy(dst, src []byte, threads int) {
	var wg sync.WaitGroup
	for i := range threads {
		lo, hi := i*len(src)/threads, (i+1)*len(src)/threads
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	wg.Wait()
}
