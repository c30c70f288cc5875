package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
)

// mib16 is 16 MiB in bytes.
const mib16 = 16 << 20

// large checks pg.Extended's collectives on 16 MiB per rank.
func large(t *testing.T, w *world) {
	n := w.n
	t.Run("Reduce/int32/SUM", func(t *testing.T) {
		w.try(t, reduceTrial(w, pg.Int32, pg.Op(pg.Sum), n-1, mib16/4, 1))
	})
	t.Run("Gather/uint8", func(t *testing.T) {
		w.try(t, gatherTrial(w, pg.Uint8, 0, mib16/n, false))
	})
	t.Run("Scatter/float32", func(t *testing.T) {
		w.try(t, scatterTrial(w, pg.Float32, n-1, mib16/4/n, false))
	})
	t.Run("AllToAll/float64/uneven", func(t *testing.T) {
		w.try(t, allToAllTrial(w, pg.Float64, splitsSumming(n, mib16/8, 3), 0, 3))
	})
	t.Run("SendRecv/bfloat16", func(t *testing.T) {
		plans := make([][]p2pOp, n)
		for r := range plans {
			next, prev := (r+1)%n, (r+n-1)%n
			out := randomBytes(pg.BFloat16, mib16/2, 16, uint64(r))
			in := randomBytes(pg.BFloat16, mib16/2, 16, uint64(prev))
			plans[r] = []p2pOp{
				{send: true, peer: next, tag: 16, buf: out, want: clone(out), what: fmt.Sprintf("16 MiB send to rank %d", next)},
				{peer: prev, tag: 16, buf: pg.NewTensor(pg.BFloat16, mib16/2), want: in,
					what: fmt.Sprintf("16 MiB recv from rank %d", prev)},
			}
		}
		runP2P(t, w, plans, fmt.Sprintf("world=%d send/recv ring of 16 MiB", n))
	})
	t.Run("AllReduceCoalesced/int64/SUM", func(t *testing.T) {
		w.try(t, allReduceCoalescedTrial(w, []pg.Dtype{pg.Int64}, pg.Op(pg.Sum), []int{1 << 20, 1<<19 + 1, 1<<19 - 1}, 4,
			false))
	})
}

// mixedInFlight issues count collectives of every kind of pg.Extended,
// and with p2p point-to-point pairs, drawn from a seeded RNG, on every
// rank in the same order, before waiting for any of them.
func mixedInFlight(t *testing.T, w *world, count int, seed uint64, p2p bool) {
	rng := newRand(seed)
	lengths := []int{0, 1, 7, 1000, 4099}
	trials := make([]trial, count)
	for i := range trials {
		d := pg.Dtypes()[rng.IntN(len(pg.Dtypes()))]
		l := lengths[rng.IntN(len(lengths))]
		root := rng.IntN(w.n)
		var k pg.ReduceKind
		for {
			if k = kinds()[rng.IntN(len(kinds()))]; validOp(d, k) {
				break
			}
		}
		op, s := opOf(k), uint64(i)
		kinds := 13
		if p2p {
			kinds++
		}
		switch rng.IntN(kinds) {
		case 0:
			trials[i] = allReduceTrial(w, d, op, l, s)
		case 1:
			trials[i] = broadcastTrial(w, d, root, l)
		case 2:
			trials[i] = allGatherTrial(w, d, l)
		case 3:
			trials[i] = reduceScatterTrial(w, d, op, l, s)
		case 4:
			trials[i] = barrierTrial(w)
		case 5:
			trials[i] = reduceTrial(w, d, op, root, l, s)
		case 6:
			trials[i] = gatherTrial(w, d, root, l, i%2 == 0)
		case 7:
			trials[i] = scatterTrial(w, d, root, l, i%2 == 0)
		case 8:
			trials[i] = allToAllTrial(w, d, nil, l, s)
		case 9:
			trials[i] = allToAllTrial(w, d, randomSplits(w.n, l+1, s), 0, s)
		case 10:
			trials[i] = allReduceCoalescedTrial(w, []pg.Dtype{d}, op, []int{l, 3}, s, i%2 == 0)
		case 11:
			trials[i] = allGatherCoalescedTrial(w, d, []int{l, 3}, i%2 == 0)
		case 12:
			trials[i] = reduceScatterCoalescedTrial(w, d, op, []int{l, 3}, s, i%2 == 0)
		default:
			trials[i] = ringTrial(w, d, l, i, s)
		}
	}
	w.tryAll(t, trials)
}

// ringTrial: every rank sends to the next and receives from the previous
// with tag; one world-wide shift. Even ranks issue the Send first, odd
// ranks the Recv, so that a backend whose Send waits for its Recv does not
// deadlock. On a world of one rank it is a barrier.
func ringTrial(w *world, d pg.Dtype, length, tag int, seed uint64) trial {
	if w.n == 1 {
		return barrierTrial(w)
	}
	what := fmt.Sprintf("world=%d send/recv shift %v len=%d tag=%d", w.n, d, length, tag)
	outs, ins := make([]pg.Tensor, w.n), make([]pg.Tensor, w.n)
	for r := range outs {
		outs[r] = randomBytes(d, length, seed, uint64(r))
		ins[r] = randomBytes(d, length, seed, uint64(100+r))
	}
	before := clones(outs)
	return trial{
		what: what,
		issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
			if r%2 == 1 {
				recv := x.Recv(ctx, ins[r], (r+w.n-1)%w.n, tag)
				return joined(recv, x.Send(ctx, outs[r], (r+1)%w.n, tag))
			}
			return joined(x.Send(ctx, outs[r], (r+1)%w.n, tag), x.Recv(ctx, ins[r], (r+w.n-1)%w.n, tag))
		}),
		verify: func(t testing.TB) {
			w.allEqual(t, what, ins, func(r int) pg.Tensor { return before[(r+w.n-1)%w.n] }, 0)
			w.unchanged(t, what, "sent tensor", outs, before, nil)
		},
	}
}
