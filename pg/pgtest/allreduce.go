package pgtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
)

// kinds lists every reduction, valid or not for a given dtype.
func kinds() []pg.ReduceKind {
	return []pg.ReduceKind{pg.Sum, pg.Avg, pg.Product, pg.Min, pg.Max, pg.Band, pg.Bor, pg.Bxor, pg.PremulSum}
}

// opOf returns the op of kind k, with a factor for PREMUL_SUM that is not
// exact in any float type.
func opOf(k pg.ReduceKind) pg.ReduceOp {
	if k == pg.PremulSum {
		return pg.PremulSumOp(0.3)
	}
	return pg.Op(k)
}

// tolerance is Tolerance, except that MIN and MAX must be exact.
func tolerance(d pg.Dtype, k pg.ReduceKind, n int) float64 {
	if k == pg.Min || k == pg.Max {
		return 0
	}
	return Tolerance(d, n)
}

// allReduce checks every dtype with every op valid for it.
func allReduce(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		for _, k := range kinds() {
			if !validOp(d, k) {
				continue
			}
			t.Run(fmt.Sprintf("%v/%v", d, k), func(t *testing.T) {
				for i, l := range lengths {
					w.try(t, allReduceTrial(w, d, opOf(k), l, uint64(i)))
				}
			})
		}
	}
}

// invalidAllReduce checks that every op a dtype does not support is
// refused with pg.ErrInvalidArgument, on every rank.
func invalidAllReduce(t *testing.T, w *world) {
	for _, d := range pg.Dtypes() {
		for _, k := range append(kinds(), pg.ReduceKind(99)) {
			if validOp(d, k) {
				continue
			}
			what := fmt.Sprintf("world=%d allreduce %v %v", w.n, d, k)
			wantInvalid(t, w, what, func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work {
				return g.AllReduce(ctx, pg.NewTensor(d, 5), pg.ReduceOp{Kind: k, Factor: 2})
			})
		}
	}
}

// wantInvalid issues f on every rank and wants every rank's Work to fail
// with an error wrapping pg.ErrInvalidArgument.
func wantInvalid(t *testing.T, w *world, what string, f func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	works := issue(w, nil, func(r int, g pg.ProcessGroup) pg.Work { return f(ctx, r, g) })
	for r, err := range w.wait(t, what, works) {
		if w.holds(r) && !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("%s: rank %d: got error %v, want one wrapping pg.ErrInvalidArgument", what, r, err)
		}
	}
}

// largeElems is 64 MiB of float32.
const largeElems = 64 << 20 / 4

// largeAllReduce sums 64 MiB of float32 per rank. The inputs are small
// integers, so the sum is exact whatever the order.
func largeAllReduce(t *testing.T, w *world) {
	what := fmt.Sprintf("world=%d allreduce float32 SUM len=%d (64 MiB)", w.n, largeElems)
	bufs := make([]pg.Tensor, w.n)
	for r := range bufs {
		bufs[r] = pg.NewTensor(pg.Float32, largeElems)
		v := pg.View[float32](bufs[r])
		for i := range v {
			v[i] = float32((i + 3*r) % 17)
		}
	}
	if !w.run(t, what, func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work {
		return g.AllReduce(ctx, bufs[r], pg.Op(pg.Sum))
	}) {
		return
	}
	got := pg.View[float32](bufs[0])
	for i, v := range got {
		want := 0
		for r := range w.n {
			want += (i + 3*r) % 17
		}
		if v != float32(want) {
			t.Fatalf("%s: rank 0: element %d is %v, want %d", what, i, v, want)
		}
	}
	w.sameBits(t, what, bufs)
}
