package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
)

// coalesced checks the three coalesced collectives on every dtype with
// every op valid for it, each batch holding tensors of every length; the
// batches of one dtype are in flight at once.
func coalesced(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		t.Run(d.String(), func(t *testing.T) {
			var trials []trial
			for i, k := range kinds() {
				if validOp(d, k) {
					trials = append(trials,
						allReduceCoalescedTrial(w, []pg.Dtype{d}, opOf(k), lengths, uint64(i), false),
						reduceScatterCoalescedTrial(w, d, opOf(k), lengths, uint64(i), false))
				}
			}
			trials = append(trials, allGatherCoalescedTrial(w, d, lengths, false))
			w.tryAll(t, trials)
		})
	}
	t.Run("mixed-dtypes", func(t *testing.T) {
		w.try(t, allReduceCoalescedTrial(w, pg.Dtypes(), pg.Op(pg.Sum), []int{5, 3, 0, 1000, 1, 7, 64}, 9, false))
	})
}

// allReduceCoalescedTrial: tensor i of the batch has dtype ds[i%len(ds)]
// and length lengths[i]; each must end as AllReduce would leave it.
func allReduceCoalescedTrial(w *world, ds []pg.Dtype, op pg.ReduceOp, lengths []int, seed uint64, viaStart bool) trial {
	what := fmt.Sprintf("world=%d allreduce_coalesced %v %v lens=%v", w.n, ds, op, lengths)
	if len(ds) == 1 {
		what = fmt.Sprintf("world=%d allreduce_coalesced %v %v lens=%v", w.n, ds[0], op, lengths)
	}
	if viaStart {
		what += " via StartCoalescing"
	}
	ins := make([][]pg.Tensor, len(lengths)) // [tensor][rank]
	bufs := make([][]pg.Tensor, w.n)         // [rank][tensor]
	for r := range bufs {
		bufs[r] = make([]pg.Tensor, len(lengths))
	}
	for i, l := range lengths {
		ins[i] = make([]pg.Tensor, w.n)
		for r := range w.n {
			ins[i][r] = input(ds[i%len(ds)], op, w.n, r, l, seed+uint64(i))
			bufs[r][i] = clone(ins[i][r])
		}
	}
	return trial{
		what: what,
		issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
			if viaStart {
				c := pg.StartCoalescing(x)
				for _, b := range bufs[r] {
					c.AllReduce(b, op)
				}
				return c.End(ctx)
			}
			return x.AllReduceCoalesced(ctx, bufs[r], op)
		}),
		verify: func(t testing.TB) {
			for i := range lengths {
				d := ds[i%len(ds)]
				want, err := Reduce(ins[i], op)
				if err != nil {
					t.Fatalf("%s: reference: %v", what, err)
				}
				got := column2(bufs, i)
				tw := fmt.Sprintf("%s, tensor %d (%v x %d)", what, i, d, lengths[i])
				if r := w.first(); r >= 0 {
					if err := Compare(got[r], want, tolerance(d, op.Kind, w.n)); err != nil {
						t.Errorf("%s: rank %d: %v", tw, r, err)
					}
				}
				w.sameBits(t, tw, got)
			}
		},
	}
}

// allGatherCoalescedTrial: a batch of allgathers, one per length.
func allGatherCoalescedTrial(w *world, d pg.Dtype, lengths []int, viaStart bool) trial {
	what := fmt.Sprintf("world=%d allgather_coalesced %v lens=%v", w.n, d, lengths)
	if viaStart {
		what += " via StartCoalescing"
	}
	ins, outs := make([][]pg.Tensor, w.n), make([][]pg.Tensor, w.n) // [rank][tensor]
	for r := range w.n {
		for i, l := range lengths {
			ins[r] = append(ins[r], randomBytes(d, l, uint64(i), uint64(r)))
			outs[r] = append(outs[r], randomBytes(d, w.n*l, uint64(i), uint64(100+r)))
		}
	}
	return trial{
		what: what,
		issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
			if viaStart {
				c := pg.StartCoalescing(x)
				for i := range ins[r] {
					c.AllGather(outs[r][i], ins[r][i])
				}
				return c.End(ctx)
			}
			return x.AllGatherCoalesced(ctx, outs[r], ins[r])
		}),
		verify: func(t testing.TB) {
			for i, l := range lengths {
				want, err := Gather(column2(ins, i))
				if err != nil {
					t.Fatalf("%s: reference: %v", what, err)
				}
				tw := fmt.Sprintf("%s, tensor %d (len %d)", what, i, l)
				w.allEqual(t, tw, column2(outs, i), func(int) pg.Tensor { return want }, 0)
			}
		},
	}
}

// reduceScatterCoalescedTrial: a batch of reducescatters, one per length
// (per rank).
func reduceScatterCoalescedTrial(w *world, d pg.Dtype, op pg.ReduceOp, lengths []int, seed uint64,
	viaStart bool) trial {
	what := fmt.Sprintf("world=%d reducescatter_coalesced %v %v lens=%v per rank", w.n, d, op, lengths)
	if viaStart {
		what += " via StartCoalescing"
	}
	ins, outs := make([][]pg.Tensor, w.n), make([][]pg.Tensor, w.n) // [rank][tensor]
	wants := make([]pg.Tensor, len(lengths))
	var refErr error
	for i, l := range lengths {
		col := make([]pg.Tensor, w.n)
		for r := range w.n {
			col[r] = input(d, op, w.n, r, w.n*l, seed+uint64(i))
			ins[r] = append(ins[r], col[r])
			outs[r] = append(outs[r], randomBytes(d, l, seed, uint64(100+r)))
		}
		var err error
		if wants[i], err = Reduce(col, op); err != nil { // now: inputs may be scratch
			refErr = err
		}
	}
	return trial{
		what: what,
		issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
			if viaStart {
				c := pg.StartCoalescing(x)
				for i := range ins[r] {
					c.ReduceScatter(outs[r][i], ins[r][i], op)
				}
				return c.End(ctx)
			}
			return x.ReduceScatterCoalesced(ctx, outs[r], ins[r], op)
		}),
		verify: func(t testing.TB) {
			if refErr != nil {
				t.Fatalf("%s: reference: %v", what, refErr)
			}
			for i, l := range lengths {
				tw := fmt.Sprintf("%s, tensor %d (len %d)", what, i, l)
				chunk := func(r int) pg.Tensor { return wants[i].Slice(r*l, (r+1)*l) }
				w.allEqual(t, tw, column2(outs, i), chunk, tolerance(d, op.Kind, w.n))
			}
		},
	}
}

// column2 returns ts[r][i] for every r.
func column2(ts [][]pg.Tensor, i int) []pg.Tensor {
	out := make([]pg.Tensor, len(ts))
	for r := range ts {
		out[r] = ts[r][i]
	}
	return out
}

// startCoalescing checks pg.StartCoalescing: a batch of each kind gives
// the results of its collectives issued one by one, as one Work with a
// sequence number; an empty batch is a finished Work; a batch that mixes
// kinds or ops is refused with pg.ErrInvalidArgument on every rank.
func startCoalescing(t *testing.T, w *world) {
	lengths := []int{3, 0, 1000}
	for _, tr := range []trial{
		allReduceCoalescedTrial(w, []pg.Dtype{pg.Float32}, pg.Op(pg.Avg), lengths, 1, true),
		allGatherCoalescedTrial(w, pg.Int64, lengths, true),
		reduceScatterCoalescedTrial(w, pg.BFloat16, pg.Op(pg.Max), lengths, 2, true),
	} {
		w.try(t, tr)
	}
	t.Run("empty", func(t *testing.T) {
		wk := pg.StartCoalescing(w.groups[max(w.first(), 0)]).End(context.Background())
		if !isDone(wk) || wk.Err() != nil {
			t.Errorf("world=%d: an empty coalescing batch: done %v, err %v; want a finished Work without error", w.n, isDone(wk),
				wk.Err())
		}
	})
	f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
	for _, c := range []struct {
		name string
		add  func(c *pg.Coalescing)
	}{
		{"allreduce then allgather", func(c *pg.Coalescing) {
			c.AllReduce(f32(4), pg.Op(pg.Sum))
			c.AllGather(f32(4*w.n), f32(4))
		}},
		{"SUM then MAX", func(c *pg.Coalescing) {
			c.AllReduce(f32(4), pg.Op(pg.Sum))
			c.AllReduce(f32(4), pg.Op(pg.Max))
		}},
	} {
		wantInvalid(t, w, fmt.Sprintf("world=%d coalescing %s", w.n, c.name),
			func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work {
				co := pg.StartCoalescing(g)
				c.add(co)
				return co.End(ctx)
			})
	}
}
