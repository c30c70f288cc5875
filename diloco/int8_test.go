package diloco

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// The int8 reduction gives every rank the same values, within the
// rounding its two quantizations allow of the exact sum: per value, half
// a step of each rank's block and half a step of the sum's block.
func TestInt8ReduceSum(t *testing.T) {
	const ranks, n = 3, 1000 // chunks of 334, two blocks each, the last one short
	gs, err := local.New(ranks, local.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	xs := make([][]float64, ranks)
	for r := range xs {
		for i := range n {
			xs[r] = append(xs[r], math.Sin(float64(7*i+r))*math.Exp(float64(i%300)/100))
		}
	}
	outs := make([][]float64, ranks)
	errs := make(chan error, ranks)
	for r, g := range gs {
		go func() {
			defer g.Close()
			ctx := context.Background()
			q, err := newInt8(g, n)
			if err == nil {
				err = q.start(ctx, xs[r])
			}
			if err == nil {
				outs[r] = make([]float64, n)
				err = q.finish(ctx, outs[r])
			}
			errs <- err
		}()
	}
	for range ranks {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		var exact float64
		for r := range ranks {
			exact += xs[r][i]
		}
		bound := blockPeak(xs, i, ranks)/254 + (blockPeak(xs, i, ranks)+1e-12)/254
		if d := math.Abs(outs[0][i] - exact); d > bound*1.01 {
			t.Fatalf("value %d: %v, the exact sum %v (off by %g, bound %g)", i, outs[0][i], exact, d, bound)
		}
		for r := 1; r < ranks; r++ {
			if outs[r][i] != outs[0][i] {
				t.Fatalf("value %d: rank %d holds %v, rank 0 %v", i, r, outs[r][i], outs[0][i])
			}
		}
	}
}

// blockPeak bounds the scales behind value i: the sum over ranks of each
// rank's largest magnitude in i's block.
func blockPeak(xs [][]float64, i, ranks int) float64 {
	chunk := (len(xs[0]) + ranks - 1) / ranks
	lo := i/chunk*chunk + (i%chunk)/int8Block*int8Block
	hi := min(lo+int8Block, (i/chunk+1)*chunk, len(xs[0]))
	var sum float64
	for r := range xs {
		var peak float64
		for _, v := range xs[r][lo:hi] {
			peak = max(peak, math.Abs(v))
		}
		sum += peak
	}
	return sum
}

// A group without AllToAll is refused by name.
func TestInt8NeedsAllToAll(t *testing.T) {
	if _, err := newInt8(plainGroup{}, 10); err == nil {
		t.Fatal("no error for a group without AllToAll")
	}
}

// plainGroup is a pg.ProcessGroup with nothing beyond it.
type plainGroup struct{ pg.ProcessGroup }

func (plainGroup) Size() int { return 2 }
