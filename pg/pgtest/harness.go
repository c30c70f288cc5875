package pgtest

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
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
	// ctl, where set, are groups with the same ranks as groups that
	// RunRank exchanges result digests through, so that the exchange
	// adds no collective to the groups under test.
	ctl []pg.ProcessGroup
	// hung is set once a call has hung (Note [bad calls]): the groups
	// may hold their locks, and later calls would hang too.
	hung bool
}

// open makes a world of n ranks with newWorld and closes it when t ends.
func open(t *testing.T, newWorld World, n int, timeout time.Duration) *world {
	t.Helper()
	groups := newWorld(t, n, timeout)
	if len(groups) != n {
		t.Fatalf("World(%d) returned %d groups", n, len(groups))
	}
	w := &world{groups: groups, n: n, timeout: timeout, limit: timeout + 30*time.Second}
	t.Cleanup(func() { closeAll(t, groups, w.limit) })
	for i, g := range groups {
		if g == nil || g.Rank() != i || g.Size() != n {
			t.Fatalf("World(%d): group %d is %v", n, i, describe(g))
		}
	}
	return w
}

func describe(g pg.ProcessGroup) string {
	if g == nil {
		return "nil"
	}
	return fmt.Sprintf("rank %d of size %d", g.Rank(), g.Size())
}

// closeAll closes every group at once, as the ranks of a job would. A
// Close that has not returned within limit fails t rather than hang it.
func closeAll(t testing.TB, groups []pg.ProcessGroup, limit time.Duration) {
	t.Helper()
	done := make(chan struct{})
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
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Errorf("Close did not return within %v on every rank: hung", limit)
	}
}

// issue runs f for every rank in ranks (all of them when nil) that this
// process holds, each in its own goroutine as the ranks of a job would,
// and returns what each returned, indexed by rank (the zero T for ranks
// held elsewhere).
func issue[T any](w *world, ranks []int, f func(r int, g pg.ProcessGroup) T) []T {
	if ranks == nil {
		ranks = allRanks(w.n)
	}
	out := make([]T, w.n)
	var wg sync.WaitGroup
	for _, r := range ranks {
		if !w.holds(r) {
			continue
		}
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
	first := slices.IndexFunc(works, func(w pg.Work) bool { return w != nil })
	for r := first + 1; first >= 0 && r < len(works); r++ {
		if works[r] != nil && works[r].Seq() != works[first].Seq() {
			seqs := make([]uint64, len(works))
			for i, wk := range works {
				if wk != nil {
					seqs[i] = wk.Seq()
				}
			}
			t.Errorf("%s: the ranks' Works have Seqs %v (by rank); want the same number on every rank", what, seqs)
			return
		}
	}
}

// sameBits reports, as test failures, every rank whose result differs in
// its bits from the first rank's. Where the world's ranks live in other
// processes (RunRank), each rank held here also exchanges a digest of its
// result through its group and compares it with every other rank's.
func (w *world) sameBits(t testing.TB, what string, results []pg.Tensor) {
	t.Helper()
	first := w.first()
	if first < 0 {
		return
	}
	for r := first + 1; r < len(results); r++ {
		if !w.holds(r) {
			continue
		}
		if i := firstDiff(results[first], results[r]); i >= 0 {
			t.Errorf("%s: rank %d's result differs in its bits from rank %d's: element %d is %s on rank %d, %s on rank %d",
				what, r, first, i, element(results[r], i), r, element(results[first], i), first)
		}
	}
	if !w.whole() { // RunRank: this process holds one rank
		w.sameDigest(t, what, first, results[first])
	}
}

// sameDigest allgathers a digest of rank r's result through rank r's
// group and reports every rank whose digest differs from r's.
func (w *world) sameDigest(t testing.TB, what string, r int, result pg.Tensor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	h := fnv.New64a()
	h.Write(result.Data)
	mine := pg.Int64s([]int64{int64(h.Sum64()), int64(len(result.Data))})
	all := pg.NewTensor(pg.Int64, 2*w.n)
	g := w.groups[r]
	if w.ctl != nil {
		g = w.ctl[r]
	}
	if err := w.waitOne(t, what+": digest exchange", r, g.AllGather(ctx, all, mine)); err != nil {
		t.Errorf("%s: rank %d: allgather of the result digests: %v", what, r, err)
		return
	}
	ds := pg.View[int64](all)
	for o := range w.n {
		if ds[2*o] != ds[2*r] || ds[2*o+1] != ds[2*r+1] {
			t.Errorf("%s: rank %d's result differs in its bits from rank %d's (digest %#x of %d bytes on rank %d, %#x of %d "+
				"bytes on rank %d)",
				what, o, r, uint64(ds[2*o]), ds[2*o+1], o, uint64(ds[2*r]), ds[2*r+1], r)
		}
	}
}

// holds reports whether this process holds rank r of w.
func (w *world) holds(r int) bool { return w.groups[r] != nil }

// whole reports whether this process holds every rank of w.
func (w *world) whole() bool { return !slices.Contains(w.groups, nil) }

// first is the lowest rank of w this process holds, or -1.
func (w *world) first() int {
	return slices.IndexFunc(w.groups, func(g pg.ProcessGroup) bool { return g != nil })
}
