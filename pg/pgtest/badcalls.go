package pgtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goddp/ddp/pg"
)

// badCall is a call that every rank of a world makes alike (Note [bad
// calls]). ext marks the methods of pg.Extended beyond pg.ProcessGroup,
// which are skipped on groups that are only a pg.ProcessGroup.
type badCall struct {
	name string
	ext  bool
	do   func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work
}

// call is a badCall of a pg.ProcessGroup method.
func call(name string, do func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work) badCall {
	return badCall{name: name, do: do}
}

// extCall is a badCall of a pg.Extended method.
func extCall(name string, do func(ctx context.Context, r int, x pg.Extended) pg.Work) badCall {
	return badCall{name: name, ext: true, do: func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work {
		return do(ctx, r, g.(pg.Extended))
	}}
}

// badCalls are the calls that every group must refuse with
// pg.ErrInvalidArgument on a world of n ranks: a nil ctx on every method
// that takes one, tensors without a dtype or with lengths the collective
// cannot use, and roots, ops, colors and rank lists that do not exist.
func badCalls(n int) []badCall {
	calls := append(nilCtxCalls(n), badTensorCalls(n)...)
	return append(calls,
		call("reducescatter unknown op", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.ReduceScatter(ctx, f32(2), f32(2*n), pg.Op(99))
		}),
		extCall("reduce unknown op", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, f32(2), 0, pg.Op(99))
		}),
		extCall("reducescatter_coalesced unknown op", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.ReduceScatterCoalesced(ctx, []pg.Tensor{f32(1)}, []pg.Tensor{f32(n)}, pg.Op(99))
		}),
		extCall("split color -2", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return subgroupWork(x.Split(ctx, -2, r))
		}),
		extCall("new_group nil ranks", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return subgroupWork(x.NewGroup(ctx, nil))
		}),
	)
}

// nilCtxCalls are calls with good arguments and a nil ctx.
func nilCtxCalls(n int) []badCall {
	var none context.Context // a nil ctx, as a caller's bug would pass it
	calls := []badCall{
		call("allreduce nil ctx", func(_ context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.AllReduce(none, f32(4), pg.Op(pg.Sum))
		}),
		call("broadcast nil ctx",
			func(_ context.Context, _ int, g pg.ProcessGroup) pg.Work { return g.Broadcast(none, f32(4), 0) }),
		call("allgather nil ctx", func(_ context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.AllGather(none, f32(2*n), f32(2))
		}),
		call("reducescatter nil ctx", func(_ context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.ReduceScatter(none, f32(2), f32(2*n), pg.Op(pg.Sum))
		}),
		call("barrier nil ctx", func(_ context.Context, _ int, g pg.ProcessGroup) pg.Work { return g.Barrier(none) }),
		extCall("monitored barrier nil ctx", func(_ context.Context, _ int, x pg.Extended) pg.Work {
			return pg.Completed(x.MonitoredBarrier(none, time.Second, true))
		}),
		extCall("reduce nil ctx", func(_ context.Context, _ int, x pg.Extended) pg.Work {
			return x.Reduce(none, f32(4), 0, pg.Op(pg.Sum))
		}),
		extCall("gather nil ctx",
			func(_ context.Context, _ int, x pg.Extended) pg.Work { return x.Gather(none, f32(2*n), f32(2), 0) }),
		extCall("scatter nil ctx",
			func(_ context.Context, _ int, x pg.Extended) pg.Work { return x.Scatter(none, f32(2), f32(2*n), 0) }),
		extCall("alltoall nil ctx", func(_ context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllToAll(none, f32(2*n), f32(2*n), nil, nil)
		}),
		extCall("allreduce_coalesced nil ctx", func(_ context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllReduceCoalesced(none, []pg.Tensor{f32(2)}, pg.Op(pg.Sum))
		}),
		extCall("allgather_coalesced nil ctx", func(_ context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllGatherCoalesced(none, []pg.Tensor{f32(n)}, []pg.Tensor{f32(1)})
		}),
		extCall("reducescatter_coalesced nil ctx", func(_ context.Context, _ int, x pg.Extended) pg.Work {
			return x.ReduceScatterCoalesced(none, []pg.Tensor{f32(1)}, []pg.Tensor{f32(n)}, pg.Op(pg.Sum))
		}),
		extCall("new_group nil ctx", func(_ context.Context, _ int, x pg.Extended) pg.Work {
			return subgroupWork(x.NewGroup(none, allRanks(n)))
		}),
		extCall("split nil ctx", func(_ context.Context, r int, x pg.Extended) pg.Work {
			return subgroupWork(x.Split(none, 0, r))
		}),
	}
	if n > 1 {
		calls = append(calls,
			extCall("send nil ctx",
				func(_ context.Context, r int, x pg.Extended) pg.Work { return x.Send(none, f32(2), (r+1)%n, 0) }),
			extCall("recv nil ctx",
				func(_ context.Context, r int, x pg.Extended) pg.Work { return x.Recv(none, f32(2), (r+n-1)%n, 0) }))
	}
	return calls
}

// badTensorCalls are calls whose tensors have no dtype, lack the data the
// collective needs, or point nowhere.
func badTensorCalls(n int) []badCall {
	var zero pg.Tensor                               // no dtype, no data
	empty := pg.Tensor{Dtype: pg.Float32}            // no data
	nowhere := pg.DeviceTensor(pg.Float32, 0, 0, 16) // 16 bytes at a null pointer
	calls := []badCall{
		call("allreduce zero tensor", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.AllReduce(ctx, zero, pg.Op(pg.Sum))
		}),
		call("allreduce device tensor at a null pointer", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.AllReduce(ctx, nowhere, pg.Op(pg.Sum))
		}),
		call("broadcast zero tensor",
			func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work { return g.Broadcast(ctx, zero, 0) }),
		call("allgather nil output",
			func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work { return g.AllGather(ctx, empty, f32(2)) }),
		call("allgather zero tensors",
			func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work { return g.AllGather(ctx, zero, zero) }),
		call("reducescatter nil input", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.ReduceScatter(ctx, f32(2), empty, pg.Op(pg.Sum))
		}),
		call("reducescatter dtypes differ", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.ReduceScatter(ctx, pg.NewTensor(pg.Float64, 2), f32(2*n), pg.Op(pg.Sum))
		}),
		extCall("reduce zero tensor", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, zero, 0, pg.Op(pg.Sum))
		}),
		extCall("gather zero input",
			func(ctx context.Context, _ int, x pg.Extended) pg.Work { return x.Gather(ctx, f32(2*n), zero, 0) }),
		extCall("scatter zero output",
			func(ctx context.Context, _ int, x pg.Extended) pg.Work { return x.Scatter(ctx, zero, f32(2*n), 0) }),
		extCall("alltoall zero tensors", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllToAll(ctx, zero, zero, nil, nil)
		}),
		extCall("alltoall nil output with splits", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllToAll(ctx, empty, f32(2*n), equalSplits(n, 2), equalSplits(n, 2))
		}),
		extCall("allreduce_coalesced zero tensor 1", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllReduceCoalesced(ctx, []pg.Tensor{f32(2), zero}, pg.Op(pg.Sum))
		}),
		extCall("allgather_coalesced nil outputs", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllGatherCoalesced(ctx, nil, []pg.Tensor{f32(1)})
		}),
		extCall("allgather_coalesced zero tensors", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllGatherCoalesced(ctx, []pg.Tensor{zero}, []pg.Tensor{zero})
		}),
	}
	if n > 1 {
		calls = append(calls,
			extCall("send zero tensor",
				func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Send(ctx, zero, (r+1)%n, 0) }),
			extCall("recv zero tensor",
				func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Recv(ctx, zero, (r+n-1)%n, 0) }))
	}
	return calls
}

// goodCalls are one call of every kind with good arguments, which a
// closed group must refuse with pg.ErrClosed.
func goodCalls(n int) []badCall {
	calls := []badCall{
		call("allreduce", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.AllReduce(ctx, f32(4), pg.Op(pg.Sum))
		}),
		call("broadcast", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work { return g.Broadcast(ctx, f32(4), 0) }),
		call("allgather",
			func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work { return g.AllGather(ctx, f32(2*n), f32(2)) }),
		call("reducescatter", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work {
			return g.ReduceScatter(ctx, f32(2), f32(2*n), pg.Op(pg.Sum))
		}),
		call("barrier", func(ctx context.Context, _ int, g pg.ProcessGroup) pg.Work { return g.Barrier(ctx) }),
		extCall("monitored barrier", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return pg.Completed(x.MonitoredBarrier(ctx, time.Second, true))
		}),
		extCall("reduce", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, f32(4), 0, pg.Op(pg.Sum))
		}),
		extCall("gather",
			func(ctx context.Context, _ int, x pg.Extended) pg.Work { return x.Gather(ctx, f32(2*n), f32(2), 0) }),
		extCall("scatter",
			func(ctx context.Context, _ int, x pg.Extended) pg.Work { return x.Scatter(ctx, f32(2), f32(2*n), 0) }),
		extCall("alltoall", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllToAll(ctx, f32(2*n), f32(2*n), nil, nil)
		}),
		extCall("allreduce_coalesced", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllReduceCoalesced(ctx, []pg.Tensor{f32(2)}, pg.Op(pg.Sum))
		}),
		extCall("allgather_coalesced", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.AllGatherCoalesced(ctx, []pg.Tensor{f32(n)}, []pg.Tensor{f32(1)})
		}),
		extCall("reducescatter_coalesced", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return x.ReduceScatterCoalesced(ctx, []pg.Tensor{f32(1)}, []pg.Tensor{f32(n)}, pg.Op(pg.Sum))
		}),
		extCall("new_group", func(ctx context.Context, _ int, x pg.Extended) pg.Work {
			return subgroupWork(x.NewGroup(ctx, allRanks(n)))
		}),
		extCall("split", func(ctx context.Context, r int, x pg.Extended) pg.Work { return subgroupWork(x.Split(ctx, 0, r)) }),
	}
	if n > 1 {
		calls = append(calls,
			extCall("send", func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Send(ctx, f32(2), (r+1)%n, 0) }),
			extCall("recv",
				func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Recv(ctx, f32(2), (r+n-1)%n, 0) }))
	}
	return calls
}

// closedCalls are the calls that must simply return on a closed group:
// Abort, a second Close (whose error, if any, is the backend's), hooks
// registered late, Rank and Size.
func closedCalls(n int) []badCall {
	done := pg.Completed(nil)
	return []badCall{
		call("Abort(nil)", func(_ context.Context, _ int, g pg.ProcessGroup) pg.Work { g.Abort(nil); return done }),
		call("Abort(cause)", func(_ context.Context, _ int, g pg.ProcessGroup) pg.Work {
			g.Abort(errors.New("pgtest: abort after close"))
			return done
		}),
		call("Close again", func(_ context.Context, _ int, g pg.ProcessGroup) pg.Work { _ = g.Close(); return done }),
		extCall("OnCompletion", func(_ context.Context, _ int, x pg.Extended) pg.Work {
			x.OnCompletion(func(pg.WorkInfo) {})
			x.OnCompletion(nil)
			return done
		}),
		call("Rank and Size", func(_ context.Context, r int, g pg.ProcessGroup) pg.Work {
			if g.Rank() != r || g.Size() != n {
				return pg.Completed(fmt.Errorf("rank %d of size %d, want rank %d of size %d", g.Rank(), g.Size(), r, n))
			}
			return done
		}),
	}
}

// subgroupWork is the Work of a NewGroup or Split call: its error, or a
// failure if it made a group (which it closes), since the calls given it
// must all be refused.
func subgroupWork(g pg.ProcessGroup, err error) pg.Work {
	if g != nil {
		_ = g.Close()
		if err == nil {
			err = errors.New("pgtest: made a subgroup, want the call refused")
		}
	}
	return pg.Completed(err)
}

// f32 is a zeroed float32 tensor of k elements.
func f32(k int) pg.Tensor { return pg.NewTensor(pg.Float32, k) }

// equalSplits are n splits of k elements.
func equalSplits(n, k int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = k
	}
	return s
}
