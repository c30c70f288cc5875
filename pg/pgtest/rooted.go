package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
)

// rootsAndLengths pairs every root of a world of n ranks with every
// length, in max(n, len(lengths)) trials: trial j has root j%n and length
// lengths[j%len(lengths)].
func rootsAndLengths(n int, lengths []int) [][2]int {
	var out [][2]int
	for j := range max(n, len(lengths)) {
		out = append(out, [2]int{j % n, lengths[j%len(lengths)]})
	}
	return out
}

// reduce checks every dtype with every op valid for it, from every root,
// all of one dtype and op in flight at once.
func reduce(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		for _, k := range kinds() {
			if !validOp(d, k) {
				continue
			}
			t.Run(fmt.Sprintf("%v/%v", d, k), func(t *testing.T) {
				var trials []trial
				for j, rl := range rootsAndLengths(w.n, lengths) {
					trials = append(trials, reduceTrial(w, d, opOf(k), rl[0], rl[1], uint64(j)))
				}
				w.tryAll(t, trials)
			})
		}
	}
}

// gather checks every dtype from every root. On odd trials the other
// ranks pass an empty output, which the contract allows.
func gather(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		t.Run(d.String(), func(t *testing.T) {
			var trials []trial
			for j, rl := range rootsAndLengths(w.n, lengths) {
				trials = append(trials, gatherTrial(w, d, rl[0], rl[1], j%2 == 1))
			}
			w.tryAll(t, trials)
		})
	}
}

// scatter checks every dtype from every root, as gather does.
func scatter(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		t.Run(d.String(), func(t *testing.T) {
			var trials []trial
			for j, rl := range rootsAndLengths(w.n, lengths) {
				trials = append(trials, scatterTrial(w, d, rl[0], rl[1], j%2 == 1))
			}
			w.tryAll(t, trials)
		})
	}
}

// reduceTrial: root's tensor within tolerance of Reduce; every other
// rank's tensor unchanged.
func reduceTrial(w *world, d pg.Dtype, op pg.ReduceOp, root, length int, seed uint64) trial {
	what := fmt.Sprintf("world=%d reduce %v %v root=%d len=%d", w.n, d, op, root, length)
	ins, bufs := make([]pg.Tensor, w.n), make([]pg.Tensor, w.n)
	for r := range ins {
		ins[r] = input(d, op, w.n, r, length, seed)
		bufs[r] = clone(ins[r])
	}
	return trial{
		what: what,
		issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Reduce(ctx, bufs[r], root, op)
		}),
		verify: func(t testing.TB) {
			want, err := Reduce(ins, op)
			if err != nil {
				t.Fatalf("%s: reference: %v", what, err)
			}
			w.allEqual(t, what, bufs[root:root+1], func(int) pg.Tensor { return want }, tolerance(d, op.Kind, w.n), root)
			w.unchanged(t, what, "tensor (not the root's)", bufs, ins, func(r int) bool { return r == root })
		},
	}
}

// gatherTrial: rank i's input lands in chunk i of root's output; the
// inputs and the other ranks' outputs are untouched. With emptyOut the
// other ranks pass an empty output.
func gatherTrial(w *world, d pg.Dtype, root, length int, emptyOut bool) trial {
	what := fmt.Sprintf("world=%d gather %v root=%d len=%d", w.n, d, root, length)
	if emptyOut {
		what += " (empty outputs off the root)"
	}
	ins, outs := make([]pg.Tensor, w.n), make([]pg.Tensor, w.n)
	for r := range ins {
		ins[r] = randomBytes(d, length, uint64(length), uint64(r))
		outs[r] = randomBytes(d, w.n*length, uint64(length), uint64(100+r))
		if emptyOut && r != root {
			outs[r] = pg.Tensor{Dtype: d}
		}
	}
	insBefore, outsBefore := clones(ins), clones(outs)
	want, err := Gather(ins)
	return trial{
		what: what,
		issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Gather(ctx, outs[r], ins[r], root)
		}),
		verify: func(t testing.TB) {
			if err != nil {
				t.Fatalf("%s: reference: %v", what, err)
			}
			w.allEqual(t, what, outs[root:root+1], func(int) pg.Tensor { return want }, 0, root)
			w.unchanged(t, what, "output (not the root's)", outs, outsBefore, func(r int) bool { return r == root })
			w.unchanged(t, what, "input", ins, insBefore, nil)
		},
	}
}

// scatterTrial: chunk i of root's input lands in rank i's output; the
// inputs are untouched. With emptyIn the other ranks pass an empty input.
func scatterTrial(w *world, d pg.Dtype, root, length int, emptyIn bool) trial {
	what := fmt.Sprintf("world=%d scatter %v root=%d len=%d per rank", w.n, d, root, length)
	if emptyIn {
		what += " (empty inputs off the root)"
	}
	ins, outs := make([]pg.Tensor, w.n), make([]pg.Tensor, w.n)
	for r := range ins {
		ins[r] = randomBytes(d, w.n*length, uint64(length), uint64(r))
		if emptyIn && r != root {
			ins[r] = pg.Tensor{Dtype: d}
		}
		outs[r] = randomBytes(d, length, uint64(length), uint64(100+r))
	}
	insBefore := clones(ins)
	want, err := Scatter(ins[root], w.n)
	return trial{
		what: what,
		issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
			return x.Scatter(ctx, outs[r], ins[r], root)
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
