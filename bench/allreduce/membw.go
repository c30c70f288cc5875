package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"
)

// memoryBandwidth measures this machine's memory bandwidth the way the
// in-process allreduce uses it: every core copies its own large buffer at
// once. A copy of X bytes reads X and writes X, so the traffic is 2X.
// The result is in bytes per second of traffic.
func memoryBandwidth(perCore int, rounds int) float64 {
	cores := runtime.GOMAXPROCS(0)
	src := make([][]byte, cores)
	dst := make([][]byte, cores)
	for i := range src {
		src[i] = make([]byte, perCore)
		dst[i] = make([]byte, perCore)
		copy(dst[i], src[i]) // fault the pages in before timing
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range cores {
		wg.Go(func() {
			for range rounds {
				copy(dst[i], src[i])
			}
		})
	}
	wg.Wait()
	return 2 * float64(cores*perCore*rounds) / time.Since(start).Seconds()
}

// reportBound prints, after the output, for allreduce rows, the bound the in-process allreduce
// can reach here. The fused shard algorithm reads each rank's S bytes once
// and writes them once per rank: 2·N·S bytes of traffic, so T ≥ 2NS/B_mem.
func reportBound(w io.Writer, n int, rows []result) {
	if !slices.ContainsFunc(rows, func(r result) bool { return r.op.name == "allreduce" }) {
		return
	}
	bmem := memoryBandwidth(64<<20, 8)
	fmt.Fprintf(w, "# memory bandwidth (parallel copy on %d cores): %.2f GB/s of traffic\n", runtime.GOMAXPROCS(0),
		bmem/1e9)
	reportBoundAt(w, n, rows, bmem)
}

// reportBoundAt is reportBound at a measured memory bandwidth bmem.
func reportBoundAt(w io.Writer, n int, rows []result, bmem float64) {
	for _, r := range rows {
		if r.op.name != "allreduce" {
			continue
		}
		bound := 2 * float64(n) * float64(r.bytes) / bmem
		fmt.Fprintf(w, "# bytes=%d ranks=%d bound=%.1fus measured=%.1fus measured/bound=%.2f\n",
			r.bytes, n, bound*1e6, float64(r.perIter.Nanoseconds())/1e3, r.perIter.Seconds()/bound)
	}
}
