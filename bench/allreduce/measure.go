package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/goddp/ddp/pg"
)

// config is what every rank needs to run the same measurements.
type config struct {
	ops    []collective
	all    bool  // --op all: skip the ops the backend lacks instead of failing
	sizes  []int // requested bytes, nccl-tests' -b/-e size (see collective)
	dtype  pg.Dtype
	root   int
	iters  int // 0 picks per size
	warmup int
	table  bool // nccl-tests' aligned text instead of CSV
	// heapBuffers: allreduce on the heap, not on memory the group hands
	// out (backend.HostBufferAllocator), where the reducer keeps its buckets.
	heapBuffers bool
}

// itersFor picks enough iterations to time a size well without taking
// long: about 512 MiB of buffer per size, between 5 and 1000 runs.
func (c config) itersFor(size int) int {
	if c.iters > 0 {
		return c.iters
	}
	return max(5, min(1000, (512<<20)/max(size, 1)))
}

// result is one output row.
type result struct {
	op      collective
	count   int // nccl-tests' count column: elements per rank (per chunk for chunked ops)
	bytes   int // nccl-tests' size column, the bytes algbw counts
	dtype   pg.Dtype
	root    int
	perIter time.Duration
	n       int
}

func (r result) algbw() float64 {
	if r.perIter <= 0 {
		return 0
	}
	return float64(r.bytes) / r.perIter.Seconds() / 1e9
}

// busbw is algbw times nccl-tests' bus factor for the op.
func (r result) busbw() float64 { return r.algbw() * r.op.factor(r.n) }

func (r result) redop() string {
	if r.op.reduces {
		return "sum"
	}
	return ""
}

func (r result) rootField() string {
	if r.op.rooted {
		return strconv.Itoa(r.root)
	}
	return ""
}

// The CSV columns are nccl-tests' (size, count, type, redop, root, time,
// algbw, busbw) with the op added; bytes stays first so that bench/plot
// draws it on the x axis.
const csvHeader = "bytes,count,type,op,redop,root,time_us,algbw_GBps,busbw_GBps"

func (r result) csv() string {
	return fmt.Sprintf("%d,%d,%v,%s,%s,%s,%.2f,%.3f,%.3f", r.bytes, r.count, r.dtype, r.op.name, r.redop(), r.rootField(),
		float64(r.perIter.Nanoseconds())/1e3, r.algbw(), r.busbw())
}

// tableHeader is nccl-tests' header, for one op.
func tableHeader(op collective, n int, backend string) string {
	return fmt.Sprintf("# %s: %d ranks, %s backend, busbw = algbw × %s\n", op.name, n, backend, op.formula) +
		fmt.Sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s\n", "size", "count", "type", "redop", "root", "time", "algbw",
			"busbw") +
		fmt.Sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)")
}

// table formats the row as nccl-tests does.
func (r result) table() string {
	us := float64(r.perIter.Nanoseconds()) / 1e3
	var t string
	switch {
	case us > 10000:
		t = fmt.Sprintf("%7.0f", us)
	case us > 100:
		t = fmt.Sprintf("%7.1f", us)
	default:
		t = fmt.Sprintf("%7.2f", us)
	}
	return fmt.Sprintf("%12d  %12d  %8v  %6s  %6s  %7s  %6.2f  %6.2f", r.bytes, r.count, r.dtype, r.redop(), r.rootField(),
		t, r.algbw(), r.busbw())
}

// measure runs the benchmark on one rank. Every rank runs it; rank 0
// writes the output. Each size is bracketed by barriers, so rank 0's
// clock covers the slowest rank.
func measure(ctx context.Context, g pg.ProcessGroup, c config, out io.Writer) ([]result, error) {
	var rows []result
	rank0 := g.Rank() == 0
	if rank0 && !c.table {
		fmt.Fprintln(out, csvHeader)
	}
	if c.root < 0 || c.root >= g.Size() {
		return nil, fmt.Errorf("--root %d: not a rank of %d", c.root, g.Size())
	}
	for _, op := range c.ops {
		if err := op.check(g); err != nil {
			if !c.all {
				return nil, err
			}
			if rank0 {
				fmt.Fprintf(out, "# skipped %v\n", err)
			}
			continue
		}
		if rank0 && c.table {
			fmt.Fprintln(out, tableHeader(op, g.Size(), pg.BackendName(g)))
		}
		var busSum float64
		var opRows int
		sizes := c.sizes
		if op.sizeless {
			sizes = []int{0} // a barrier has no size: once
		}
		for _, size := range sizes {
			r, err := measureOne(ctx, g, c, op, size)
			if err != nil {
				return nil, fmt.Errorf("%s at %d bytes: %w", op.name, size, err)
			}
			if !rank0 {
				continue
			}
			if c.table {
				fmt.Fprintln(out, r.table())
			} else {
				fmt.Fprintln(out, r.csv())
			}
			rows = append(rows, r)
			busSum += r.busbw()
			opRows++
		}
		if rank0 && c.table && opRows > 0 {
			fmt.Fprintf(out, "# Avg bus bandwidth    : %.6g\n#\n", busSum/float64(opRows))
		}
	}
	return rows, nil
}

// measureOne times op at one requested size on this rank.
func measureOne(ctx context.Context, g pg.ProcessGroup, c config, op collective, size int) (result, error) {
	count, bytes := op.layout(size, c.dtype, g.Size())
	prepare := op.prepare
	if op.name == "allreduce" && !c.heapBuffers {
		prepare = prepAllReduceGroupBuffer
	}
	once, err := prepare(g, c.dtype, count, c.root)
	if err != nil {
		return result{}, err
	}
	for range c.warmup {
		if err := once(ctx); err != nil {
			return result{}, err
		}
	}
	if err := g.Barrier(ctx).Wait(ctx); err != nil {
		return result{}, err
	}
	iters := c.itersFor(bytes)
	start := time.Now()
	for range iters {
		if err := once(ctx); err != nil {
			return result{}, err
		}
	}
	if err := g.Barrier(ctx).Wait(ctx); err != nil {
		return result{}, err
	}
	el := time.Since(start)
	return result{op: op, count: count, bytes: bytes, dtype: c.dtype, root: c.root, perIter: el / time.Duration(iters),
		n: g.Size()}, nil
}
