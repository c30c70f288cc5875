package pgtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// runExtendedFaults checks how subgroups and point-to-point calls fail,
// each case on a fresh world with a short group timeout, in parallel.
func runExtendedFaults(t *testing.T, newWorld World, g grid) {
	for _, abort := range []bool{false, true} {
		how := map[bool]string{false: "Close", true: "Abort"}[abort]
		t.Run(fmt.Sprintf("Subgroup/%s/world=4/rank=2", how), func(t *testing.T) {
			t.Parallel()
			w := open(t, newWorld, 4, faultTimeout)
			requireExtended(t, w)
			subgroupDies(t, w, abort)
		})
	}
	for _, c := range []struct {
		n, recv, send int
		abort         bool
	}{{2, 0, 1, false}, {3, 2, 0, false}, {2, 1, 0, true}} {
		how := map[bool]string{false: "Closes", true: "Aborts"}[c.abort]
		t.Run(fmt.Sprintf("Recv/Sender%s/world=%d/rank=%d", how, c.n, c.send), func(t *testing.T) {
			t.Parallel()
			w := open(t, newWorld, c.n, faultTimeout)
			requireExtended(t, w)
			senderDies(t, w, c.recv, c.send, c.abort)
		})
	}
	t.Run("Subgroup/Timeout/world=3/absent=2", func(t *testing.T) {
		t.Parallel()
		w := open(t, newWorld, 3, faultTimeout)
		requireExtended(t, w)
		subgroupNoShow(t, w)
	})
	t.Run("Subgroup/OutlivesParent/world=3", func(t *testing.T) {
		t.Parallel()
		w := open(t, newWorld, 3, faultTimeout)
		requireExtended(t, w)
		outlivesParent(t, w)
	})
	t.Run("Recv/NoSender/world=2", func(t *testing.T) {
		t.Parallel()
		w := open(t, newWorld, 2, faultTimeout)
		requireExtended(t, w)
		recvNoShow(t, w)
	})
	t.Run("Gather/RootRefuses/world=3", func(t *testing.T) {
		t.Parallel()
		w := open(t, newWorld, 3, faultTimeout)
		requireExtended(t, w)
		gatherRootRefuses(t, w)
	})
	for _, n := range []int{3, 1} {
		t.Run(fmt.Sprintf("AllToAll/InconsistentSplits/world=3/sends=%d", n), func(t *testing.T) {
			if g.uncheckedSplits {
				t.Skip("Options.UncheckedAllToAllSplits: the backend cannot detect splits that disagree between ranks")
			}
			t.Parallel()
			w := open(t, newWorld, 3, faultTimeout)
			requireExtended(t, w)
			inconsistentSplits(t, w, n)
		})
	}
	t.Run("Recv/SizeMismatch/world=2", func(t *testing.T) {
		t.Parallel()
		w := open(t, newWorld, 2, faultTimeout)
		requireExtended(t, w)
		sizeMismatch(t, w)
	})
}

// subgroupDies: in a world of 4, A = NewGroup([0 1 2]) and B =
// NewGroup([0 1 3]). Rank 2 closes A while ranks 0 and 1 wait for it in an
// allreduce on A (or aborts A, and then they issue one): they must fail
// naming rank 2 (its rank in A too), well before the group timeout. The
// parent and B, which rank 2's fault does not touch, must then still
// complete collectives.
func subgroupDies(t *testing.T, w *world, abort bool) {
	const k = 2
	what := fmt.Sprintf("world=4, rank %d closes subgroup [0 1 2] during an allreduce", k)
	if abort {
		what = fmt.Sprintf("world=4, rank %d aborts subgroup [0 1 2]", k)
	}
	a := makeSubs(t, w, "NewGroup([0 1 2])", [][]int{{0, 1, 2}},
		func(ctx context.Context, r int, s pg.Splitter) (pg.ProcessGroup, error) {
			return s.NewGroup(ctx, []int{0, 1, 2})
		})[0]
	b := makeSubs(t, w, "NewGroup([0 1 3])", [][]int{{0, 1, 3}},
		func(ctx context.Context, r int, s pg.Splitter) (pg.ProcessGroup, error) {
			return s.NewGroup(ctx, []int{0, 1, 3})
		})[0]
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	others := []int{0, 1}
	recs := make([]*recorder, 2)
	for _, r := range others {
		recs[r] = newRecorder()
		a.w.groups[r].(pg.CompletionHooker).OnCompletion(recs[r].hook)
	}
	cause := errors.New("pgtest: deliberate abort of a subgroup")
	start := time.Now()
	var works []pg.Work
	if abort {
		a.w.groups[k].Abort(cause)
		works = allReduceOn(ctx, a.w, others)
	} else {
		works = allReduceOn(ctx, a.w, others)
		time.Sleep(100 * time.Millisecond)
		for _, r := range others {
			if isDone(works[r]) {
				t.Errorf("%s: rank %d finished (err %v) although rank %d never issued the allreduce", what, r, works[r].Err(), k)
			}
		}
		if err := a.w.groups[k].Close(); err != nil {
			t.Logf("%s: rank %d: Close: %v", what, k, err)
		}
	}
	errs := a.w.wait(t, what, works)
	for _, r := range others {
		namesRank(t, what, r, errs[r], k)
	}
	if took := time.Since(start); took >= w.timeout {
		t.Errorf("%s: the others took %v to fail, the whole group timeout %v: the fault went unnoticed", what, took,
			w.timeout)
	}
	hookCtx, hookCancel := context.WithTimeout(ctx, 5*time.Second)
	defer hookCancel()
	for _, r := range others {
		if works[r].Seq() == 0 {
			continue // refused before issue, the group being known broken: not a collective
		}
		infos := recs[r].await(hookCtx, 1)
		if len(infos) != 1 || infos[0].Op != pg.OpAllReduce || infos[0].Seq != works[r].Seq() || infos[0].Err == nil {
			t.Errorf("%s: rank %d: the completion hook saw %s, with errors %v; want the failed allreduce #%d with its error",
				what, r, describeInfos(infos), infoErrs(infos), works[r].Seq())
		}
	}
	if abort {
		if err := a.w.waitOne(t, what, k, a.w.groups[k].Barrier(ctx)); !errors.Is(err, pg.ErrAborted) ||
			!errors.Is(err, cause) {
			t.Errorf("%s: rank %d: a barrier on the aborted subgroup got %v, want pg.ErrAborted wrapping the cause", what, k,
				err)
		}
	}
	after := func(sw *world, name string) {
		tr := allReduceTrial(sw, pg.Float32, pg.Op(pg.Sum), 300, 1)
		tr.what = fmt.Sprintf("%s, then an allreduce on %s", what, name)
		sw.try(t, tr)
	}
	after(w, "the parent")
	after(b.w, "subgroup [0 1 3]")
}

// senderDies: rank recv waits in a Recv from rank send, which closes its
// group (or aborts it first, before the Recv is posted). The Recv must
// fail naming rank send, well before the group timeout.
func senderDies(t *testing.T, w *world, recv, send int, abort bool) {
	what := fmt.Sprintf("world=%d, rank %d closes while rank %d waits in a recv from it", w.n, send, recv)
	if abort {
		what = fmt.Sprintf("world=%d, rank %d aborts, then rank %d receives from it", w.n, send, recv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	start := time.Now()
	x := w.groups[recv].(pg.PointToPoint)
	var wk pg.Work
	if abort {
		w.groups[send].Abort(errors.New("pgtest: deliberate abort"))
		wk = x.Recv(ctx, pg.NewTensor(pg.Float32, 64), send, 3)
	} else {
		wk = x.Recv(ctx, pg.NewTensor(pg.Float32, 64), send, 3)
		time.Sleep(100 * time.Millisecond)
		if isDone(wk) {
			t.Errorf("%s: the recv finished (err %v) although nothing was sent", what, wk.Err())
		}
		if err := w.groups[send].Close(); err != nil {
			t.Logf("%s: rank %d: Close: %v", what, send, err)
		}
	}
	namesRank(t, what, recv, w.waitOne(t, what, recv, wk), send)
	if took := time.Since(start); took >= w.timeout {
		t.Errorf("%s: the recv took %v to fail, the whole group timeout %v: the fault went unnoticed", what, took, w.timeout)
	}
}

// sizeMismatch: rank 0 sends 8 float32s, rank 1 receives into 7. Both
// must fail with pg.ErrInvalidArgument.
func sizeMismatch(t *testing.T, w *world) {
	what := "world=2, rank 0 sends 32 bytes and rank 1 receives 28"
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	works := []pg.Work{
		w.groups[0].(pg.PointToPoint).Send(ctx, pg.NewTensor(pg.Float32, 8), 1, 0),
		w.groups[1].(pg.PointToPoint).Recv(ctx, pg.NewTensor(pg.Float32, 7), 0, 0),
	}
	for r, err := range w.wait(t, what, works) {
		if !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("%s: rank %d: got %v, want an error wrapping pg.ErrInvalidArgument", what, r, err)
		}
	}
}

func infoErrs(infos []pg.WorkInfo) []error {
	var errs []error
	for _, info := range infos {
		errs = append(errs, info.Err)
	}
	return errs
}

// outlivesParent: the parent of a subgroup is closed on every rank; the
// subgroup, which is closed on its own, must still work.
func outlivesParent(t *testing.T, w *world) {
	s := makeSubs(t, w, "NewGroup([2 0])", [][]int{{2, 0}},
		func(ctx context.Context, r int, sp pg.Splitter) (pg.ProcessGroup, error) {
			return sp.NewGroup(ctx, []int{2, 0})
		})[0]
	closeAll(t, w.groups, w.limit)
	tr := allReduceTrial(s.w, pg.Float64, pg.Op(pg.Max), 500, 2)
	tr.what = "world=3, parent closed: " + tr.what + " on subgroup [2 0]"
	s.w.try(t, tr)
}

// subgroupNoShow: rank 2 never issues the allreduce that ranks 0 and 1
// wait in on subgroup [0 1 2]. They must fail with pg.ErrTimeout after
// about the group timeout, which a subgroup inherits from its parent.
func subgroupNoShow(t *testing.T, w *world) {
	s := makeSubs(t, w, "NewGroup([0 1 2])", [][]int{{0, 1, 2}},
		func(ctx context.Context, r int, sp pg.Splitter) (pg.ProcessGroup, error) {
			return sp.NewGroup(ctx, []int{0, 1, 2})
		})[0]
	what := fmt.Sprintf("world=%d, rank 2 never issues the allreduce on subgroup [0 1 2]", w.n)
	if !w.holds(0) && !w.holds(1) { // RunRankFault: this process is rank 2 or outside the subgroup
		w.stayAway()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	start := time.Now()
	errs := s.w.wait(t, what, allReduceOn(ctx, s.w, []int{0, 1}))
	took := time.Since(start)
	for _, r := range []int{0, 1} {
		if w.holds(r) && !errors.Is(errs[r], pg.ErrTimeout) {
			t.Errorf("%s: rank %d: got %v, want an error wrapping pg.ErrTimeout", what, r, errs[r])
		}
	}
	if took < w.timeout*9/10 || took > w.timeout+5*time.Second {
		t.Errorf("%s: ranks 0 and 1 failed after %v; want about the parent's group timeout %v", what, took, w.timeout)
	}
}

// recvNoShow: rank 1 receives from rank 0, which never sends. The Recv
// must fail with pg.ErrTimeout after about the group timeout.
func recvNoShow(t *testing.T, w *world) {
	what := fmt.Sprintf("world=%d, rank 1 receives from rank 0, which never sends", w.n)
	if !w.holds(1) { // RunRankFault: this process is another rank
		w.stayAway()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	start := time.Now()
	err := w.waitOne(t, what, 1, w.groups[1].(pg.PointToPoint).Recv(ctx, pg.NewTensor(pg.Int64, 3), 0, 0))
	took := time.Since(start)
	if !errors.Is(err, pg.ErrTimeout) {
		t.Errorf("%s: got %v, want an error wrapping pg.ErrTimeout", what, err)
	}
	if took < w.timeout*9/10 || took > w.timeout+5*time.Second {
		t.Errorf("%s: the recv failed after %v; want about the group timeout %v", what, took, w.timeout)
	}
}

// gatherRootRefuses: the root of a gather passes an output too short, so
// it refuses the call with pg.ErrInvalidArgument. The other ranks cannot
// know: their gather may succeed (their part is sent) or fail, but must
// not hang past the group timeout. The ranks are now out of step, so an
// allreduce after it may fail, but must not hang or give wrong results.
func gatherRootRefuses(t *testing.T, w *world) {
	const root = 1
	what := fmt.Sprintf("world=%d gather whose root %d passes an output one element short", w.n, root)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	start := time.Now()
	works := issue(w, nil, func(r int, g pg.ProcessGroup) pg.Work {
		return g.(pg.Rooted).Gather(ctx, pg.NewTensor(pg.Int32, 4*w.n-1), pg.NewTensor(pg.Int32, 4), root)
	})
	for r, err := range w.wait(t, what, works) {
		if r == root && !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("%s: root %d: got %v, want pg.ErrInvalidArgument", what, r, err)
		} else if r != root {
			t.Logf("%s: rank %d: %v", what, r, err)
		}
	}
	if took := time.Since(start); took > w.timeout+5*time.Second {
		t.Errorf("%s: the other ranks took %v to finish; want at most about the group timeout %v", what, took, w.timeout)
	}
	tr := allReduceTrial(w, pg.Int64, pg.Op(pg.Sum), 4, 1)
	tr.what = what + ", then " + tr.what
	works = issue(w, nil, func(r int, g pg.ProcessGroup) pg.Work { return tr.issue(ctx, r, g) })
	failed := false
	for r, err := range w.wait(t, tr.what, works) {
		if err != nil {
			t.Logf("%s: rank %d: %v", tr.what, r, err)
			failed = true
		}
	}
	if !failed {
		tr.verify(t)
	}
}

// inconsistentSplits: every rank's AllToAll splits are valid on their
// own, but rank 0 sends rank 1 n elements where rank 1 expects two. Rank 1
// must fail with pg.ErrInvalidArgument or pg.ErrMismatch (rank 0, whose
// own part went as it said, may succeed), and no rank may hang past the
// group timeout.
func inconsistentSplits(t *testing.T, w *world, n int) {
	what := fmt.Sprintf("world=%d alltoall where rank 0 sends rank 1 %d elements and rank 1 expects two", w.n, n)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	splits := [][]int{{2, 2, 2}, {2, 2, 2}, {2, 2, 2}} // what each rank expects
	send := [][]int{{2, n, 2}, splits[1], splits[2]}
	start := time.Now()
	works := issue(w, nil, func(r int, g pg.ProcessGroup) pg.Work {
		in, out := send[r], columnOf(splits, r)
		return g.(pg.AllToAller).AllToAll(ctx, pg.NewTensor(pg.Float32, sum(out)), pg.NewTensor(pg.Float32, sum(in)), out, in)
	})
	for r, err := range w.wait(t, what, works) {
		if r == 1 && !errors.Is(err, pg.ErrInvalidArgument) && !errors.Is(err, pg.ErrMismatch) {
			t.Errorf("%s: rank %d: got %v, want pg.ErrInvalidArgument or pg.ErrMismatch", what, r, err)
		} else {
			t.Logf("%s: rank %d: %v", what, r, err)
		}
	}
	if took := time.Since(start); took > w.timeout+5*time.Second {
		t.Errorf("%s: the ranks took %v to finish; want at most about the group timeout %v", what, took, w.timeout)
	}
}
