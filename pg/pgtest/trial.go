package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
)

// A trial is one collective on every rank of a world: its buffers, how
// each rank issues it, and how to judge the results once every rank's
// Work has succeeded.
type trial struct {
	what   string
	issue  func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work
	verify func(t testing.TB)
}

// try runs one trial on w and judges it.
func (w *world) try(t testing.TB, tr trial) {
	t.Helper()
	if w.run(t, tr.what, tr.issue) {
		tr.verify(t)
	}
}

// allReduceTrial: every rank's result within tolerance of Reduce and bit
// for bit the same as every other rank's.
func allReduceTrial(w *world, d pg.Dtype, op pg.ReduceOp, length int, seed uint64) trial {
	what := fmt.Sprintf("world=%d allreduce %v %v len=%d", w.n, d, op, length)
	ins, bufs := make([]pg.Tensor, w.n), make([]pg.Tensor, w.n)
	for r := range ins {
		ins[r] = input(d, op, w.n, r, length, seed)
		bufs[r] = clone(ins[r])
	}
	return trial{
		what:  what,
		issue: func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work { return g.AllReduce(ctx, bufs[r], op) },
		verify: func(t testing.TB) {
			want, err := Reduce(ins, op)
			if err != nil {
				t.Fatalf("%s: reference: %v", what, err)
			}
			// The first rank against the reference, the others bit for bit against it.
			if r := w.first(); r >= 0 {
				if err := Compare(bufs[r], want, tolerance(d, op.Kind, w.n)); err != nil {
					t.Errorf("%s: rank %d: %v", what, r, err)
				}
			}
			w.sameBits(t, what, bufs)
		},
	}
}

// broadcastTrial: every rank ends with root's bits. The data are
// arbitrary bits, which a broadcast must move untouched.
func broadcastTrial(w *world, d pg.Dtype, root, length int) trial {
	what := fmt.Sprintf("world=%d broadcast %v root=%d len=%d", w.n, d, root, length)
	want := randomBytes(d, length, uint64(length), uint64(root))
	bufs := make([]pg.Tensor, w.n)
	for r := range bufs {
		bufs[r] = randomBytes(d, length, uint64(length), uint64(100+r))
	}
	copy(bufs[root].Data, want.Data)
	return trial{
		what:   what,
		issue:  func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work { return g.Broadcast(ctx, bufs[r], root) },
		verify: func(t testing.TB) { w.allEqual(t, what, bufs, func(int) pg.Tensor { return want }, 0) },
	}
}

// allGatherTrial: rank i's input lands in chunk i of every rank's output.
func allGatherTrial(w *world, d pg.Dtype, length int) trial {
	what := fmt.Sprintf("world=%d allgather %v len=%d", w.n, d, length)
	ins, outs := make([]pg.Tensor, w.n), make([]pg.Tensor, w.n)
	want := pg.NewTensor(d, w.n*length)
	for r := range ins {
		ins[r] = randomBytes(d, length, uint64(length), uint64(r))
		outs[r] = randomBytes(d, w.n*length, uint64(length), uint64(100+r))
		copy(want.Slice(r*length, (r+1)*length).Data, ins[r].Data)
	}
	return trial{
		what:   what,
		issue:  func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work { return g.AllGather(ctx, outs[r], ins[r]) },
		verify: func(t testing.TB) { w.allEqual(t, what, outs, func(int) pg.Tensor { return want }, 0) },
	}
}

// reduceScatterTrial: rank r's output is chunk r of Reduce of the inputs.
func reduceScatterTrial(w *world, d pg.Dtype, op pg.ReduceOp, length int, seed uint64) trial {
	what := fmt.Sprintf("world=%d reducescatter %v %v len=%d per rank", w.n, d, op, length)
	ins, outs := make([]pg.Tensor, w.n), make([]pg.Tensor, w.n)
	for r := range ins {
		ins[r] = input(d, op, w.n, r, w.n*length, seed)
		outs[r] = randomBytes(d, length, seed, uint64(100+r))
	}
	want, err := Reduce(ins, op) // now: a backend may use its input as scratch
	return trial{
		what: what,
		issue: func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work {
			return g.ReduceScatter(ctx, outs[r], ins[r], op)
		},
		verify: func(t testing.TB) {
			if err != nil {
				t.Fatalf("%s: reference: %v", what, err)
			}
			chunk := func(r int) pg.Tensor { return want.Slice(r*length, (r+1)*length) }
			w.allEqual(t, what, outs, chunk, tolerance(d, op.Kind, w.n))
		},
	}
}

// barrierTrial: a barrier on every rank, which must simply succeed.
func barrierTrial(w *world) trial {
	return trial{
		what:   fmt.Sprintf("world=%d barrier", w.n),
		issue:  func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work { return g.Barrier(ctx) },
		verify: func(testing.TB) {},
	}
}

// allEqual compares the result of each rank held here with want(rank).
// got[i] is the result of rank i, or of rank ranks[i] when ranks are given.
func (w *world) allEqual(t testing.TB, what string, got []pg.Tensor, want func(r int) pg.Tensor, tol float64,
	ranks ...int) {
	t.Helper()
	for i, g := range got {
		r := i
		if ranks != nil {
			r = ranks[i]
		}
		if !w.holds(r) {
			continue
		}
		if err := Compare(g, want(r), tol); err != nil {
			t.Errorf("%s: rank %d: %v", what, r, err)
		}
	}
}
