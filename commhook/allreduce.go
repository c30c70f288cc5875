package commhook

import (
	"context"
	"fmt"

	fvec "github.com/goddp/ddp/internal/vec"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Allreduce is the default hook, PyTorch's allreduce_hook: divide the
// bucket by the world size, then sum it across ranks. Dividing first, as
// PyTorch does, keeps low-precision sums from overflowing.
type Allreduce struct{}

// Name is "allreduce".
func (Allreduce) Name() string { return "allreduce" }

// Run divides b's buffer by the world size and starts a SUM allreduce of it.
func (Allreduce) Run(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	n := g.Size()
	if b.Divisor > 0 {
		n = b.Divisor
	}
	if err := Divide(b.Buffer, n); err != nil {
		return pg.Completed(err)
	}
	return g.AllReduce(ctx, b.Buffer, pg.Op(pg.Sum))
}

// allreduceBySize is Allreduce dividing by g's size whatever b.Divisor
// says: torch's default._allreduce_fut, which the plain paths of the
// other hooks call (PowerSGD before StartIter, post-local SGD), while
// only allreduce_hook honours a Join's divisor.
func allreduceBySize(ctx context.Context, g pg.ProcessGroup, b *GradBucket) pg.Work {
	whole := *b
	whole.Divisor = 0
	return Allreduce{}.Run(ctx, g, &whole)
}

// Divide divides every element of a floating-point tensor by n, in place,
// with true division as torch's div_ does. float16 and bfloat16 elements
// are divided in float32 and rounded back to nearest even, as torch
// computes half-precision arithmetic.
func Divide(t pg.Tensor, n int) error {
	switch t.Dtype {
	case pg.Float16, pg.BFloat16:
		divideHalf(t, float32(n))
	case pg.Float32:
		fvec.DivF32(pg.View[float32](t), float32(n))
	case pg.Float64:
		fvec.DivF64(pg.View[float64](t), float64(n))
	default:
		return fmt.Errorf("commhook: cannot average a %v bucket; gradients must be floating point", t.Dtype)
	}
	return nil
}

// divideHalf divides a float16 or bfloat16 tensor by d in float32, a
// block at a time: widen, divide, round back to nearest even (backend.Convert's
// casts).
func divideHalf(t pg.Tensor, d float32) {
	var a [4096]float32 // 16 KiB: stays in L1, and amortizes Convert's checks
	for lo := 0; lo < t.Len(); lo += len(a) {
		part := t.Slice(lo, min(lo+len(a), t.Len()))
		block := a[:part.Len()]
		_ = backend.Convert(pg.Float32s(block), part) // float to float of one length: cannot fail
		fvec.DivF32(block, d)
		_ = backend.Convert(part, pg.Float32s(block))
	}
}

// Noop leaves the bucket as it is and communicates nothing: each rank
// keeps its own gradients. It is for measuring the cost of everything
// around communication.
type Noop struct{}

// Name is "noop".
func (Noop) Name() string { return "noop" }

// Run returns a finished Work.
func (Noop) Run(context.Context, pg.ProcessGroup, *GradBucket) pg.Work { return pg.Completed(nil) }
