package pgtest

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// Note [bad calls]: a call with a nil ctx, tensors that cannot be what the
// collective needs, a root, peer or op that does not exist, or any call
// on a closed group is the caller's bug, and it must cost the caller an
// error, not the process: no backend may panic on it (a panic below a
// lock would leave the lock held and hang every later call, Close
// included), and none may hang. Every rank makes the same bad call, so
// each refuses it on its own, before it takes a sequence number; the
// group is then still in step and must go on working. The suite makes
// each call in a goroutine of its own, turns a panic into a test failure
// and gives up on a call that has not returned, with its Work finished,
// within the world's limit: a hung call may hold the group's locks, so
// the world is not used again.

// misuse checks that every bad call fails at once on every rank with
// pg.ErrInvalidArgument and Seq 0, without a panic or a hang, and that
// the group then still runs collectives.
func misuse(t *testing.T, w *world) {
	for _, c := range w.callable(badCalls(w.n)) {
		what := fmt.Sprintf("world=%d %s", w.n, c.name)
		for r, o := range w.guarded(t, what, ctxCall(w, c.do)) {
			if !w.holds(r) || o.judged {
				continue
			}
			if !errors.Is(o.err, pg.ErrInvalidArgument) {
				t.Errorf("%s: rank %d: got error %v, want one wrapping pg.ErrInvalidArgument", what, r, o.err)
			} else if o.seq != 0 {
				t.Errorf("%s: rank %d: the refused call has Seq %d, want 0", what, r, o.seq)
			}
		}
	}
	// The refusals must leave the group in step.
	w.try(t, allReduceTrial(w, pg.Float32, pg.Op(pg.Sum), 17, 1))
	w.try(t, barrierTrial(w))
	if w.extended() {
		w.try(t, reduceTrial(w, pg.Int64, pg.Op(pg.Max), w.n-1, 9, 2))
	}
}

// afterClose closes every rank of w, then checks that every call fails
// at once with pg.ErrClosed (a bad call with any error), that Abort and a
// second Close return, and that none of them panics or hangs.
func afterClose(t *testing.T, w *world) {
	w.guarded(t, fmt.Sprintf("world=%d Close", w.n), func(r int, g pg.ProcessGroup) pg.Work {
		return pg.Completed(g.Close()) // its error is the backend's to define
	})
	for _, c := range w.callable(goodCalls(w.n)) {
		what := fmt.Sprintf("world=%d after Close: %s", w.n, c.name)
		for r, o := range w.guarded(t, what, ctxCall(w, c.do)) {
			if w.holds(r) && !o.judged && !errors.Is(o.err, pg.ErrClosed) {
				t.Errorf("%s: rank %d: got error %v, want one wrapping pg.ErrClosed", what, r, o.err)
			}
		}
	}
	for _, c := range w.callable(badCalls(w.n)) {
		what := fmt.Sprintf("world=%d after Close: %s", w.n, c.name)
		for r, o := range w.guarded(t, what, ctxCall(w, c.do)) {
			if w.holds(r) && !o.judged && o.err == nil {
				t.Errorf("%s: rank %d: succeeded, want an error", what, r)
			}
		}
	}
	for _, c := range w.callable(closedCalls(w.n)) {
		what := fmt.Sprintf("world=%d after Close: %s", w.n, c.name)
		for r, o := range w.guarded(t, what, ctxCall(w, c.do)) {
			if w.holds(r) && !o.judged && o.err != nil {
				t.Errorf("%s: rank %d: %v", what, r, o.err)
			}
		}
	}
}

// callable are the calls of cs that w's groups have: all of them on
// groups that implement pg.Extended, the pg.ProcessGroup ones on others
// (a wrapper such as pg/instrument's).
func (w *world) callable(cs []badCall) []badCall {
	if w.extended() {
		return cs
	}
	return slices.DeleteFunc(cs, func(c badCall) bool { return c.ext })
}

// extended reports whether every group of w held here implements
// pg.Extended.
func (w *world) extended() bool {
	for r, g := range w.groups {
		if w.holds(r) && notExtended(g) != nil {
			return false
		}
	}
	return true
}

// ctxCall gives do a ctx that ends after w's limit, and waits for the
// Work do returns; guarded bounds the wait.
func ctxCall(w *world, do func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work) func(r int,
	g pg.ProcessGroup) pg.Work {
	return func(r int, g pg.ProcessGroup) pg.Work {
		ctx, cancel := context.WithTimeout(context.Background(), w.limit)
		defer cancel()
		wk := do(ctx, r, g)
		if wk != nil {
			<-wk.Done()
		}
		return wk
	}
}

// outcome is what one rank's call came to. A call that panicked (and
// failed the test saying so) has judged set, and is not judged again.
type outcome struct {
	err    error
	seq    uint64
	judged bool
}

// guarded makes call on every rank this process holds, each in a
// goroutine of its own, and returns each rank's outcome once its call has
// returned and its Work finished. A call that panics or returns a nil
// Work fails t; one that has not returned, with its Work finished, within
// w's limit fails t as a hang and ends it (Note [bad calls]).
func (w *world) guarded(t testing.TB, what string, call func(r int, g pg.ProcessGroup) pg.Work) []outcome {
	t.Helper()
	type result struct {
		r     int
		o     outcome
		panic string
	}
	results := make(chan result, w.n)
	pending := map[int]bool{}
	for r, g := range w.groups {
		if g == nil {
			continue
		}
		pending[r] = true
		go func() {
			res := result{r: r}
			defer func() {
				if p := recover(); p != nil {
					res.panic = fmt.Sprintf("%v\n%s", p, debug.Stack())
				}
				results <- res
			}()
			wk := call(r, g)
			if wk == nil {
				res.panic = "returned a nil Work"
				return
			}
			res.o = outcome{err: wk.Err(), seq: wk.Seq()}
		}()
	}
	out := make([]outcome, w.n)
	timer := time.NewTimer(w.limit)
	defer timer.Stop()
	for len(pending) > 0 {
		select {
		case res := <-results:
			delete(pending, res.r)
			if res.panic != "" {
				t.Errorf("%s: rank %d: panicked: %s", what, res.r, res.panic)
				out[res.r].judged = true
				continue
			}
			out[res.r] = res.o
		case <-timer.C:
			hung := make([]int, 0, len(pending))
			for r := range pending {
				hung = append(hung, r)
			}
			slices.Sort(hung)
			w.hung = true
			t.Fatalf("%s: ranks %v: the call did not return, or its Work did not finish, within %v: hung", what, hung, w.limit)
		}
	}
	return out
}
