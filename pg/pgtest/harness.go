package pgtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// world is a set of ranks under test, as one job would hold them.
type world struct {
	groups  []pg.ProcessGroup
	n       int
	timeout time.Duration // the group timeout
	limit   time.Duration // how long the suite waits for a Work before calling it a hang
}

// open makes a world of n ranks with newWorld and closes it when t ends.
func open(t *testing.T, newWorld World, n int, timeout time.Duration) *world {
	t.Helper()
	groups := newWorld(t, n, timeout)
	if len(groups) != n {
		t.Fatalf("World(%d) returned %d groups", n, len(groups))
	}
	t.Cleanup(func() { closeAll(t, groups) })
	for i, g := range groups {
		if g == nil || g.Rank() != i || g.Size() != n {
			t.Fatalf("World(%d): group %d is %v", n, i, describe(g))
		}
	}
	return &world{groups: groups, n: n, timeout: timeout, limit: timeout + 30*time.Second}
}

func describe(g pg.ProcessGroup) string {
	if g == nil {
		return "nil"
	}
	return fmt.Sprintf("rank %d of size %d", g.Rank(), g.Size())
}

// closeAll closes every group at once, as the ranks of a job would.
func closeAll(t testing.TB, groups []pg.ProcessGroup) {
	var wg sync.WaitGroup
	for _, g := range groups {
		if g == nil {
			continue
		}
		wg.Go(func() {
			if err := g.Close(); err != nil {
				t.Logf("rank %d: Close: %v", g.Rank(), err)
			}
		})
	}
	wg.Wait()
}

// issue runs f for every rank in ranks (all of them when nil), each in its
// own goroutine as the ranks of a job would, and returns what each
// returned, indexed by rank.
func issue[T any](w *world, ranks []int, f func(r int, g pg.ProcessGroup) T) []T {
	if ranks == nil {
		ranks = allRanks(w.n)
	}
	out := make([]T, w.n)
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { out[r] = f(r, w.groups[r]) })
	}
	wg.Wait()
	return out
}

func allRanks(n int) []int {
	rs := make([]int, n)
	for i := range rs {
		rs[i] = i
	}
	return rs
}

// wait waits for every non-nil Work and returns their errors by rank. A
// Work that has not finished within w.limit fails the test as a hang.
func (w *world) wait(t testing.TB, what string, works []pg.Work) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	errs := make([]error, len(works))
	for r, wk := range works {
		if wk == nil {
			continue
		}
		select {
		case <-wk.Done():
			errs[r] = wk.Err()
		case <-ctx.Done():
			t.Fatalf("%s: rank %d: the Work did not finish within %v: hung", what, r, w.limit)
		}
	}
	return errs
}

// waitOne waits for rank r's Work wk, like wait.
func (w *world) waitOne(t testing.TB, what string, r int, wk pg.Work) error {
	t.Helper()
	works := make([]pg.Work, w.n)
	works[r] = wk
	return w.wait(t, what, works)[r]
}

// run issues a collective on every rank, waits for it, and reports each
// rank's error as a test failure. It returns false if any rank failed.
func (w *world) run(t testing.TB, what string, f func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	works := issue(w, nil, func(r int, g pg.ProcessGroup) pg.Work { return f(ctx, r, g) })
	ok := true
	for r, err := range w.wait(t, what, works) {
		if err != nil {
			t.Errorf("%s: rank %d: %v", what, r, err)
			ok = false
		}
	}
	sameSeq(t, what, works)
	return ok
}

// sameSeq reports, as a test failure, a collective whose Work.Seq differs
// between ranks.
func sameSeq(t testing.TB, what string, works []pg.Work) {
	t.Helper()
	for r := 1; r < len(works); r++ {
		if works[r].Seq() != works[0].Seq() {
			seqs := make([]uint64, len(works))
			for i, wk := range works {
				seqs[i] = wk.Seq()
			}
			t.Errorf("%s: the ranks' Works have Seqs %v (by rank); want the same number on every rank", what, seqs)
			return
		}
	}
}

// sameBits reports, as test failures, every rank whose result differs in
// its bits from rank 0's.
func sameBits(t testing.TB, what string, results []pg.Tensor) {
	t.Helper()
	for r := 1; r < len(results); r++ {
		if i := firstDiff(results[0], results[r]); i >= 0 {
			t.Errorf("%s: rank %d's result differs in its bits from rank 0's: element %d is %s on rank %d, %s on rank 0",
				what, r, i, element(results[r], i), r, element(results[0], i))
		}
	}
}
