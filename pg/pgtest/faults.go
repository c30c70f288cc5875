package pgtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// runFaults checks how a world fails, each case on a fresh world with a
// short group timeout. The cases run in parallel: most of them wait.
func runFaults(t *testing.T, newWorld World) {
	for _, c := range []struct{ n, k int }{{2, 1}, {3, 0}, {4, 2}} {
		t.Run(fmt.Sprintf("Close/world=%d/rank=%d", c.n, c.k), func(t *testing.T) {
			t.Parallel()
			closeDuring(t, open(t, newWorld, c.n, faultTimeout), c.k)
		})
	}
	t.Run("Abort/world=3/rank=2", func(t *testing.T) {
		t.Parallel()
		abortDuring(t, open(t, newWorld, 3, faultTimeout), 2)
	})
	for _, c := range []struct{ n, k int }{{2, 1}, {4, 0}} {
		t.Run(fmt.Sprintf("Timeout/world=%d/absent=%d", c.n, c.k), func(t *testing.T) {
			t.Parallel()
			noShow(t, open(t, newWorld, c.n, faultTimeout), c.k)
		})
	}
	for _, c := range []struct {
		n       int
		absent  []int
		waitAll bool
	}{{3, nil, true}, {2, []int{1}, true}, {3, []int{2}, false}, {4, []int{1, 3}, true}, {4, []int{1, 3}, false}} {
		t.Run(fmt.Sprintf("MonitoredBarrier/world=%d/absent=%v/waitAll=%v", c.n, c.absent, c.waitAll), func(t *testing.T) {
			t.Parallel()
			monitored(t, open(t, newWorld, c.n, faultTimeout), c.absent, c.waitAll)
		})
	}
}

// except lists the ranks of a world of n that are not in out.
func except(n int, out ...int) []int {
	var rs []int
	for r := range n {
		if !slices.Contains(out, r) {
			rs = append(rs, r)
		}
	}
	return rs
}

// allReduceOn issues a small float32 SUM on the given ranks.
func allReduceOn(ctx context.Context, w *world, ranks []int) []pg.Work {
	return issue(w, ranks, func(r int, g pg.ProcessGroup) pg.Work {
		return g.AllReduce(ctx, pg.NewTensor(pg.Float32, 1024), pg.Op(pg.Sum))
	})
}

// closeDuring: rank k closes while the others wait for it in an
// allreduce. Each of them must fail, well before the group timeout, with
// a *pg.CollectiveError that names rank k.
func closeDuring(t *testing.T, w *world, k int) {
	what := fmt.Sprintf("world=%d, rank %d closes during an allreduce", w.n, k)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	others := except(w.n, k)
	start := time.Now()
	works := allReduceOn(ctx, w, others)
	time.Sleep(100 * time.Millisecond)
	for _, r := range others {
		if isDone(works[r]) {
			t.Errorf("%s: rank %d finished (err %v) although rank %d never issued the allreduce", what, r, works[r].Err(), k)
		}
	}
	if err := w.groups[k].Close(); err != nil {
		t.Logf("%s: rank %d: Close: %v", what, k, err)
	}
	errs := w.wait(t, what, works)
	for _, r := range others {
		namesRank(t, what, r, errs[r], k)
	}
	if took := time.Since(start); took >= w.timeout {
		t.Errorf("%s: the others took %v to fail, the whole group timeout %v: the close went unnoticed", what, took,
			w.timeout)
	}
}

// abortDuring: rank k aborts with three allreduces of its own pending.
// They must fail with pg.ErrAborted wrapping the cause, and the others'
// next allreduce must fail naming rank k.
func abortDuring(t *testing.T, w *world, k int) {
	what := fmt.Sprintf("world=%d, rank %d aborts during an allreduce", w.n, k)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	cause := errors.New("pgtest: deliberate abort")
	var mine []pg.Work
	for range 3 {
		mine = append(mine, allReduceOn(ctx, w, []int{k})[k])
	}
	time.Sleep(50 * time.Millisecond)
	w.groups[k].Abort(cause)
	for i, wk := range mine {
		err := w.waitOne(t, fmt.Sprintf("%s, pending allreduce #%d", what, i), k, wk)
		if !errors.Is(err, pg.ErrAborted) || !errors.Is(err, cause) {
			t.Errorf("%s: rank %d, pending allreduce #%d: got %v, want an error wrapping pg.ErrAborted and the cause", what, k,
				i, err)
		}
	}
	start := time.Now()
	others := except(w.n, k)
	errs := w.wait(t, what, allReduceOn(ctx, w, others))
	for _, r := range others {
		namesRank(t, what, r, errs[r], k)
	}
	if took := time.Since(start); took >= w.timeout {
		t.Errorf("%s: the others took %v to fail, the whole group timeout %v: the abort went unnoticed", what, took,
			w.timeout)
	}
	if err := w.waitOne(t, what, k, w.groups[k].Barrier(ctx)); !errors.Is(err, pg.ErrAborted) {
		t.Errorf("%s: rank %d: a barrier after Abort got %v, want pg.ErrAborted", what, k, err)
	}
}

// namesRank wants err to be a *pg.CollectiveError that blames rank k: as
// its Peer or, for algorithms whose failures travel through other ranks,
// in its message. A timeout does not count: the rank's departure must be
// noticed, not waited out.
func namesRank(t testing.TB, what string, r int, err error, k int) {
	t.Helper()
	var ce *pg.CollectiveError
	switch {
	case err == nil:
		t.Errorf("%s: rank %d: the collective succeeded; want it to fail naming rank %d", what, r, k)
	case !errors.As(err, &ce):
		t.Errorf("%s: rank %d: error %q (%T) is not a *pg.CollectiveError", what, r, err, err)
	case errors.Is(err, pg.ErrTimeout):
		t.Errorf("%s: rank %d: error %q is a timeout; want the departure of rank %d noticed", what, r, err, k)
	case ce.Peer != k && !strings.Contains(err.Error(), fmt.Sprintf("rank %d", k)):
		t.Errorf("%s: rank %d: error %q does not name rank %d", what, r, err, k)
	}
}

// noShow: rank k never issues the allreduce the others wait in. Each of
// them must fail with pg.ErrTimeout after the group timeout, not before
// and not much after.
func noShow(t *testing.T, w *world, k int) {
	what := fmt.Sprintf("world=%d, rank %d never issues the allreduce", w.n, k)
	if !w.whole() && w.holds(k) { // RunRankFault: this process is rank k, which stays away
		w.stayAway()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	others := except(w.n, k)
	start := time.Now()
	errs := w.wait(t, what, allReduceOn(ctx, w, others))
	took := time.Since(start)
	for _, r := range others {
		if w.holds(r) && !errors.Is(errs[r], pg.ErrTimeout) {
			t.Errorf("%s: rank %d: got %v, want an error wrapping pg.ErrTimeout", what, r, errs[r])
		}
	}
	if took < w.timeout*9/10 || took > w.timeout+5*time.Second {
		t.Errorf("%s: the others failed after %v; want about the group timeout %v", what, took, w.timeout)
	}
}

// monitored: every rank but absent enters MonitoredBarrier. Each of them
// must get a *pg.MissingRanksError naming the absent ranks (the lowest
// only, without waitAll), or succeed when none is absent.
func monitored(t *testing.T, w *world, absent []int, waitAll bool) {
	if _, ok := w.groups[0].(pg.MonitoredBarrierer); !ok {
		t.Skipf("%s groups have no MonitoredBarrier", pg.BackendName(w.groups[0]))
	}
	what := fmt.Sprintf("world=%d, monitored barrier without ranks %v (waitAll=%v)", w.n, absent, waitAll)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	errs := issue(w, except(w.n, absent...), func(r int, g pg.ProcessGroup) error {
		return g.(pg.MonitoredBarrierer).MonitoredBarrier(ctx, time.Second, waitAll)
	})
	want := absent
	if !waitAll && len(absent) > 1 {
		want = absent[:1]
	}
	for _, r := range except(w.n, absent...) {
		var mr *pg.MissingRanksError
		switch err := errs[r]; {
		case len(absent) == 0 && err != nil:
			t.Errorf("%s: rank %d: %v", what, r, err)
		case len(absent) == 0:
		case !errors.As(err, &mr) || !errors.Is(err, pg.ErrTimeout):
			t.Errorf("%s: rank %d: got %v, want a *pg.MissingRanksError", what, r, err)
		case !slices.Equal(mr.Missing, want):
			t.Errorf("%s: rank %d: missing ranks %v, want %v", what, r, mr.Missing, want)
		}
	}
}

func isDone(w pg.Work) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}
