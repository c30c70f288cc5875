package pgtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
)

// invalidExtended checks that pg.Extended's collectives refuse bad
// arguments with pg.ErrInvalidArgument on every rank, with Seq 0; that
// NewGroup refuses bad rank lists; and that the group still works after.
func invalidExtended(t *testing.T, w *world) {
	n := w.n
	var cases []refusal
	cases = append(cases, rootRefusals(n)...)
	cases = append(cases, allToAllRefusals(n)...)
	cases = append(cases, p2pRefusals(n)...)
	cases = append(cases, coalescedRefusals(n)...)
	if n > 1 {
		cases = append(cases,
			refusal{"alltoall without splits, length not a multiple of the size",
				func(ctx context.Context, r int, x pg.Extended) pg.Work {
					return x.AllToAll(ctx, f32(2*n+1), f32(2*n+1), nil, nil)
				}})
	}
	for _, c := range cases {
		wantRefused(t, w, fmt.Sprintf("world=%d %s", n, c.name), c.f)
	}
	refusedNewGroups(t, w)
	// Refusals must leave the group in step.
	w.try(t, allReduceTrial(w, pg.Float32, pg.Op(pg.Sum), 17, 1))
	w.try(t, reduceTrial(w, pg.Int32, pg.Op(pg.Sum), 0, 17, 1))
}

// refusal is a pg.Extended call that every rank makes alike and that every
// rank must refuse.
type refusal struct {
	name string
	f    func(ctx context.Context, r int, x pg.Extended) pg.Work
}

// rootRefusals are reduce, gather and scatter calls with a root that does
// not exist, or an op or tensor reduce cannot use, on a world of n ranks.
func rootRefusals(n int) []refusal {
	return []refusal{
		{"reduce root -1", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, f32(4), -1, pg.Op(pg.Sum))
		}},
		{"reduce root = size", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, f32(4), n, pg.Op(pg.Sum))
		}},
		{"reduce BAND on float32", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, f32(4), 0, pg.Op(pg.Band))
		}},
		{"reduce PREMUL_SUM on int32", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, pg.NewTensor(pg.Int32, 4), 0, pg.PremulSumOp(2))
		}},
		{"reduce ragged bytes", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, pg.Tensor{Dtype: pg.Float32, Data: make([]byte, 5)}, 0, pg.Op(pg.Sum))
		}},
		{"gather root = size",
			func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Gather(ctx, f32(2*n), f32(2), n) }},
		{"gather root -1",
			func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Gather(ctx, f32(2*n), f32(2), -1) }},
		{"scatter root -1",
			func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Scatter(ctx, f32(2), f32(2*n), -1) }},
		{"scatter root = size",
			func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Scatter(ctx, f32(2), f32(2*n), n) }},
	}
}

// allToAllRefusals are all-to-all calls whose dtypes or splits do not fit
// their tensors, on a world of n ranks.
func allToAllRefusals(n int) []refusal {
	return []refusal{
		{"alltoall dtypes differ", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.AllToAll(ctx, pg.NewTensor(pg.Int32, 2*n), f32(2*n), nil, nil)
		}},
		{"alltoall one split too many", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.AllToAll(ctx, f32(2*n), f32(2*n+2), equalSplits(n, 2), append(equalSplits(n, 2), 2))
		}},
		{"alltoall splits sum to more than the input", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.AllToAll(ctx, f32(2*n), f32(2*n), equalSplits(n, 2), equalSplits(n, 3))
		}},
		{"alltoall output splits sum to less than the output", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.AllToAll(ctx, f32(2*n+1), f32(2*n), equalSplits(n, 2), equalSplits(n, 2))
		}},
		{"alltoall negative split", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			s := equalSplits(n, 2)
			s[0], s[n-1] = -1, s[n-1]+3
			if n == 1 {
				s[0] = -1
			}
			return x.AllToAll(ctx, f32(2*n), f32(2*n), equalSplits(n, 2), s)
		}},
	}
}

// p2pRefusals are sends and receives with a peer that does not exist or
// is the caller, or a negative tag, on a world of n ranks.
func p2pRefusals(n int) []refusal {
	return []refusal{
		{"send to itself", func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Send(ctx, f32(2), r, 0) }},
		{"send to rank = size", func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Send(ctx, f32(2), n, 0) }},
		{"recv from rank -1", func(ctx context.Context, r int, x pg.Extended) pg.Work { return x.Recv(ctx, f32(2), -1, 0) }},
		{"send with a negative tag", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Send(ctx, f32(2), (r+1)%n, -3)
		}},
		{"recv with a negative tag", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Recv(ctx, f32(2), (r+1)%n, -1)
		}},
	}
}

// coalescedRefusals are coalesced calls whose lists do not pair up, or
// whose op or tensors the collective cannot use, on a world of n ranks.
func coalescedRefusals(n int) []refusal {
	return []refusal{
		{"allgather_coalesced 2 outputs for 1 input", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.AllGatherCoalesced(ctx, []pg.Tensor{f32(n), f32(n)}, []pg.Tensor{f32(1)})
		}},
		{"allgather_coalesced output 1 too short", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.AllGatherCoalesced(ctx, []pg.Tensor{f32(n), f32(2*n - 1)}, []pg.Tensor{f32(1), f32(2)})
		}},
		{"reducescatter_coalesced 1 output for 2 inputs", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.ReduceScatterCoalesced(ctx, []pg.Tensor{f32(1)}, []pg.Tensor{f32(n), f32(n)}, pg.Op(pg.Sum))
		}},
		{"reducescatter_coalesced BXOR on float32", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.ReduceScatterCoalesced(ctx, []pg.Tensor{f32(1)}, []pg.Tensor{f32(n)}, pg.Op(pg.Bxor))
		}},
		{"allreduce_coalesced BAND on int32 and float32", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.AllReduceCoalesced(ctx, []pg.Tensor{pg.NewTensor(pg.Int32, 3), f32(3)}, pg.Op(pg.Band))
		}},
		{"allreduce_coalesced ragged tensor 1", func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.AllReduceCoalesced(ctx, []pg.Tensor{f32(3), {Dtype: pg.Int64, Data: make([]byte, 12)}}, pg.Op(pg.Sum))
		}},
	}
}

// refusedNewGroups wants NewGroup to refuse, on every rank, rank lists that
// are empty, repeat a rank or name one that does not exist.
func refusedNewGroups(t *testing.T, w *world) {
	n := w.n
	for _, ranks := range [][]int{{}, {0, 0}, {n}, {-1}} {
		what := fmt.Sprintf("world=%d NewGroup(%v)", n, ranks)
		ctx, cancel := context.WithTimeout(context.Background(), w.limit)
		type result struct {
			g   pg.ProcessGroup
			err error
		}
		res := issue(w, nil, func(r int, g pg.ProcessGroup) result {
			sg, err := g.(pg.Splitter).NewGroup(ctx, ranks)
			return result{sg, err}
		})
		cancel()
		for r, x := range res {
			if !w.holds(r) {
				continue
			}
			if x.g != nil {
				t.Errorf("%s: rank %d: got a group, want it refused", what, r)
				_ = x.g.Close()
			}
			if !errors.Is(x.err, pg.ErrInvalidArgument) {
				t.Errorf("%s: rank %d: got error %v, want one wrapping pg.ErrInvalidArgument", what, r, x.err)
			}
		}
	}
}

// wantRefused is wantInvalid for pg.Extended calls: every rank's Work
// must fail with pg.ErrInvalidArgument and have Seq 0.
func wantRefused(t *testing.T, w *world, what string, f func(ctx context.Context, r int, x pg.Extended) pg.Work) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	g := onExt(f)
	works := issue(w, nil, func(r int, grp pg.ProcessGroup) pg.Work { return g(ctx, r, grp) })
	for r, err := range w.wait(t, what, works) {
		if !w.holds(r) {
			continue
		}
		if !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("%s: rank %d: got error %v, want one wrapping pg.ErrInvalidArgument", what, r, err)
		} else if s := works[r].Seq(); s != 0 {
			t.Errorf("%s: rank %d: the refused call has Seq %d, want 0", what, r, s)
		}
	}
}
