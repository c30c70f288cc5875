package pgtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// broadcast checks every dtype from every root.
func broadcast(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		t.Run(d.String(), func(t *testing.T) {
			for root := range w.n {
				for _, l := range lengths {
					w.try(t, broadcastTrial(w, d, root, l))
				}
			}
		})
	}
}

// allGather checks every dtype: rank i's input must land in chunk i of
// every rank's output.
func allGather(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		t.Run(d.String(), func(t *testing.T) {
			for _, l := range lengths {
				w.try(t, allGatherTrial(w, d, l))
			}
		})
	}
}

// reduceScatter checks every dtype with every op valid for it. Rank r's
// output must be chunk r of the reduction of every rank's input.
func reduceScatter(t *testing.T, w *world, lengths []int) {
	for _, d := range pg.Dtypes() {
		for _, k := range kinds() {
			if !validOp(d, k) {
				continue
			}
			t.Run(fmt.Sprintf("%v/%v", d, k), func(t *testing.T) {
				for i, l := range lengths {
					w.try(t, reduceScatterTrial(w, d, opOf(k), l, uint64(i)))
				}
			})
		}
	}
}

// barrier checks that no rank leaves a barrier before the last one enters.
// Where the ranks live in other processes (RunRank), which of them has
// entered is not to be seen from here: every rank simply passes one.
func barrier(t *testing.T, w *world) {
	if !w.whole() {
		w.try(t, barrierTrial(w))
		return
	}
	what := fmt.Sprintf("world=%d barrier", w.n)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	last := w.n - 1
	works := issue(w, allRanks(last), func(r int, g pg.ProcessGroup) pg.Work { return g.Barrier(ctx) })
	time.Sleep(50 * time.Millisecond)
	for r, wk := range works[:last] {
		select {
		case <-wk.Done():
			t.Errorf("%s: rank %d left the barrier (err %v) before rank %d entered it", what, r, wk.Err(), last)
		default:
		}
	}
	works[last] = w.groups[last].Barrier(ctx)
	for r, err := range w.wait(t, what, works) {
		if err != nil {
			t.Errorf("%s: rank %d: %v", what, r, err)
		}
	}
}

// invalidArguments checks that each collective refuses bad arguments with
// pg.ErrInvalidArgument on every rank.
func invalidArguments(t *testing.T, w *world) {
	f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
	cases := []struct {
		name string
		f    func(ctx context.Context, g pg.ProcessGroup) pg.Work
	}{
		{"broadcast root -1", func(ctx context.Context, g pg.ProcessGroup) pg.Work { return g.Broadcast(ctx, f32(4), -1) }},
		{"broadcast root = size",
			func(ctx context.Context, g pg.ProcessGroup) pg.Work { return g.Broadcast(ctx, f32(4), w.n) }},
		{"allgather output too short", func(ctx context.Context, g pg.ProcessGroup) pg.Work {
			return g.AllGather(ctx, f32(3*w.n-1), f32(3))
		}},
		{"allgather dtypes differ", func(ctx context.Context, g pg.ProcessGroup) pg.Work {
			return g.AllGather(ctx, pg.NewTensor(pg.Float64, 3*w.n), f32(3))
		}},
		{"reducescatter input too long", func(ctx context.Context, g pg.ProcessGroup) pg.Work {
			return g.ReduceScatter(ctx, f32(3), f32(3*w.n+1), pg.Op(pg.Sum))
		}},
		{"reducescatter BAND on float32", func(ctx context.Context, g pg.ProcessGroup) pg.Work {
			return g.ReduceScatter(ctx, f32(3), f32(3*w.n), pg.Op(pg.Band))
		}},
		{"allreduce unknown dtype", func(ctx context.Context, g pg.ProcessGroup) pg.Work {
			return g.AllReduce(ctx, pg.Tensor{Dtype: pg.Dtype(0), Data: make([]byte, 8)}, pg.Op(pg.Sum))
		}},
		{"allreduce ragged bytes", func(ctx context.Context, g pg.ProcessGroup) pg.Work {
			return g.AllReduce(ctx, pg.Tensor{Dtype: pg.Float32, Data: make([]byte, 7)}, pg.Op(pg.Sum))
		}},
	}
	for _, c := range cases {
		wantInvalid(t, w, fmt.Sprintf("world=%d %s", w.n, c.name),
			func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work {
				return c.f(ctx, g)
			})
	}
}
