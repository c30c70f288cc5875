package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
)

// allToAll checks every dtype with equal chunks of each length, all of one
// dtype in flight at once.
func allToAll(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		t.Run(d.String(), func(t *testing.T) {
			var trials []trial
			for j, l := range lengths {
				trials = append(trials, allToAllTrial(w, d, nil, l, uint64(j)))
			}
			w.tryAll(t, trials)
		})
	}
}

// allToAllUneven checks every dtype with random uneven splits, zero-length
// chunks among them, one matrix per seed.
func allToAllUneven(t *testing.T, w *world, seeds int) {
	for _, d := range pg.Dtypes() {
		t.Run(d.String(), func(t *testing.T) {
			var trials []trial
			for s := range seeds {
				seed := uint64(s) + 7*uint64(d)
				trials = append(trials, allToAllTrial(w, d, randomSplits(w.n, 300, seed), 0, seed))
			}
			w.tryAll(t, trials)
		})
	}
}

// allToAllTrial: rank j's output is chunk j of every rank's input, in rank
// order; the inputs are untouched. With nil splits the chunks hold chunk
// elements each and AllToAll gets nil splits; otherwise splits[i][j]
// elements go from rank i to rank j.
func allToAllTrial(w *world, d pg.Dtype, splits [][]int, chunk int, seed uint64) trial {
	what := fmt.Sprintf("world=%d alltoall %v chunk=%d", w.n, d, chunk)
	if splits != nil {
		what = fmt.Sprintf("world=%d alltoall %v splits=%v", w.n, d, splits)
		if len(what) > 200 {
			what = fmt.Sprintf("world=%d alltoall %v uneven splits (seed %d)", w.n, d, seed)
		}
	}
	ins, outs := make([]pg.Tensor, w.n), make([]pg.Tensor, w.n)
	for r := range ins {
		inLen, outLen := w.n*chunk, w.n*chunk
		if splits != nil {
			inLen, outLen = sum(splits[r]), sum(columnOf(splits, r))
		}
		ins[r] = randomBytes(d, inLen, seed, uint64(r))
		outs[r] = randomBytes(d, outLen, seed, uint64(100+r))
	}
	insBefore := clones(ins)
	want, err := AllToAll(ins, splits)
	return trial{
		what: what,
		issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
			if splits == nil {
				return x.AllToAll(ctx, outs[r], ins[r], nil, nil)
			}
			return x.AllToAll(ctx, outs[r], ins[r], columnOf(splits, r), append([]int(nil), splits[r]...))
		}),
		verify: func(t testing.TB) {
			if err != nil {
				t.Fatalf("%s: reference: %v", what, err)
			}
			w.allEqual(t, what, outs, func(r int) pg.Tensor { return want[r] }, 0)
			w.unchanged(t, what, "input", ins, insBefore, nil)
		},
	}
}
