package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/goddp/ddp/pg"
)

// config is what every rank needs to run the same measurements.
type config struct {
	sizes  []int // bytes per buffer
	dtype  pg.Dtype
	iters  int // 0 picks per size
	warmup int
}

// itersFor picks enough iterations to time a size well without taking
// long: about 512 MiB of buffer per size, between 5 and 1000 runs.
func (c config) itersFor(size int) int {
	if c.iters > 0 {
		return c.iters
	}
	return max(5, min(1000, (512<<20)/max(size, 1)))
}

// result is one CSV row.
type result struct {
	bytes   int
	perIter time.Duration
	n       int
}

func (r result) algbw() float64 {
	if r.perIter <= 0 {
		return 0
	}
	return float64(r.bytes) / r.perIter.Seconds() / 1e9
}

// busbw follows nccl-tests: allreduce moves 2(n-1)/n of the buffer per rank.
func (r result) busbw() float64 {
	return r.algbw() * 2 * float64(r.n-1) / float64(r.n)
}

const csvHeader = "bytes,time_us,algbw_GBps,busbw_GBps"

func (r result) csv() string {
	return fmt.Sprintf("%d,%.2f,%.3f,%.3f", r.bytes, float64(r.perIter.Nanoseconds())/1e3, r.algbw(), r.busbw())
}

// measure runs the allreduce benchmark on one rank. Every rank runs it;
// rank 0 writes the CSV. Each size is bracketed by barriers, so rank 0's
// clock covers the slowest rank.
func measure(ctx context.Context, g pg.ProcessGroup, c config, out io.Writer) ([]result, error) {
	var rows []result
	if g.Rank() == 0 {
		fmt.Fprintln(out, csvHeader)
	}
	for _, size := range c.sizes {
		elems := size / c.dtype.Size()
		// Zeros stay zeros under repeated sums: no overflow, no denormals.
		t := pg.NewTensor(c.dtype, elems)
		for range c.warmup {
			if err := g.AllReduce(ctx, t, pg.Op(pg.Sum)).Wait(ctx); err != nil {
				return nil, err
			}
		}
		if err := g.Barrier(ctx).Wait(ctx); err != nil {
			return nil, err
		}
		iters := c.itersFor(size)
		start := time.Now()
		for range iters {
			if err := g.AllReduce(ctx, t, pg.Op(pg.Sum)).Wait(ctx); err != nil {
				return nil, err
			}
		}
		if err := g.Barrier(ctx).Wait(ctx); err != nil {
			return nil, err
		}
		el := time.Since(start)
		if g.Rank() == 0 {
			r := result{bytes: elems * c.dtype.Size(), perIter: el / time.Duration(iters), n: g.Size()}
			fmt.Fprintln(out, r.csv())
			rows = append(rows, r)
		}
	}
	return rows, nil
}
