package pgtest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/goddp/ddp/pg"
)

// sub is a subgroup under test: a world of its own, and for each of its
// ranks the rank of the parent world (w.groups[i] is the group of parent
// rank members[i]).
type sub struct {
	w       *world
	members []int
	name    string
}

// makeSubs calls create on every rank of parent at once (one NewGroup or
// Split), fails t on any error, checks the result against members (the
// parent ranks of each expected subgroup, in subgroup rank order; ranks in
// none must get nil) and returns the subgroups. They are closed when t
// ends.
func makeSubs(t *testing.T, parent *world, name string, members [][]int,
	create func(ctx context.Context, r int, s pg.Splitter) (pg.ProcessGroup, error)) []sub {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), parent.limit)
	defer cancel()
	type result struct {
		g   pg.ProcessGroup
		err error
	}
	res := issue(parent, nil, func(r int, g pg.ProcessGroup) result {
		s, ok := g.(pg.Splitter)
		if !ok {
			return result{err: notExtended(g)}
		}
		sg, err := create(ctx, r, s)
		return result{sg, err}
	})
	got := make([]pg.ProcessGroup, parent.n)
	for r, x := range res {
		got[r] = x.g
	}
	t.Cleanup(func() { closeAll(t, got, parent.limit) })
	for r, x := range res {
		if x.err != nil {
			t.Fatalf("world=%d %s: rank %d: %v", parent.n, name, r, x.err)
		}
	}
	in := map[int]bool{}
	var subs []sub
	for _, ms := range members {
		s := sub{w: &world{n: len(ms), timeout: parent.timeout, limit: parent.limit}, members: ms,
			name: fmt.Sprintf("%s: subgroup of parent ranks %v", name, ms)}
		for i, p := range ms {
			in[p] = true
			g := got[p]
			if !parent.holds(p) { // RunRank: held by another process
				s.w.groups = append(s.w.groups, nil)
				continue
			}
			if g == nil || g.Rank() != i || g.Size() != len(ms) {
				t.Fatalf("world=%d %s: parent rank %d got %s, want rank %d of size %d", parent.n, s.name, p, describe(g), i,
					len(ms))
			}
			s.w.groups = append(s.w.groups, g)
		}
		requireExtended(t, s.w)
		subs = append(subs, s)
	}
	for r, g := range got {
		if parent.holds(r) && !in[r] && g != nil {
			t.Errorf("world=%d %s: parent rank %d is in no subgroup but got %s, want nil", parent.n, name, r, describe(g))
		}
	}
	return subs
}

// newGroups checks NewGroup: all ranks in reverse order, the even ranks,
// the last rank alone and, from three ranks up, a rotation; then every
// subgroup's first collective is number 1, and collectives of every
// subgroup and of the parent, in flight at once, are right in each.
func newGroups(t *testing.T, w *world) {
	lists := [][]int{reversed(allRanks(w.n)), {w.n - 1}}
	if w.n > 1 {
		var evens []int
		for r := 0; r < w.n; r += 2 {
			evens = append(evens, r)
		}
		lists = append(lists, evens)
	}
	if w.n > 2 {
		lists = append(lists, []int{w.n - 1, 0, 1})
	}
	var subs []sub
	for _, ranks := range lists {
		subs = append(subs, makeSubs(t, w, fmt.Sprintf("NewGroup(%v)", ranks), [][]int{ranks},
			func(ctx context.Context, r int, s pg.Splitter) (pg.ProcessGroup, error) {
				return s.NewGroup(ctx, slices.Clone(ranks))
			})...)
	}
	firstIsOne(t, w, subs)
	checkSubs(t, w, subs, false)
}

// splits checks Split: by parity with descending keys and the last rank
// left out (NoColor), everyone with keys that tie, and a split of that
// group again. With p2p the subgroups also send and receive.
func splits(t *testing.T, w *world, p2p bool) {
	colors, keys := make([]int, w.n), make([]int, w.n)
	for r := range w.n {
		colors[r], keys[r] = r%2, -r
		if w.n > 2 && r == w.n-1 {
			colors[r] = pg.NoColor
		}
	}
	subs := splitOn(t, w, "Split(parity, -rank)", colors, keys)
	for r := range w.n {
		colors[r], keys[r] = 7, (w.n-r)%3
	}
	all := splitOn(t, w, "Split(7, (size-rank)%3)", colors, keys)
	subs = append(subs, all...)
	firstIsOne(t, w, subs) // before the nested split, a collective of all[0]
	// Nested: split the group of everyone into pairs, reversed.
	inner := all[0]
	colors, keys = make([]int, inner.w.n), make([]int, inner.w.n)
	for r := range inner.w.n {
		colors[r], keys[r] = r/2, -r
	}
	nested := splitOn(t, inner.w, "nested Split(rank/2, -rank)", colors, keys)
	firstIsOne(t, w, nested)
	for _, s := range nested {
		for i, m := range s.members {
			s.members[i] = inner.members[m] // in the coordinates of w
		}
	}
	checkSubs(t, w, append(subs, nested...), p2p)
}

// splitOn splits parent with each rank's color and key and checks the
// groups against splitMembers.
func splitOn(t *testing.T, parent *world, name string, colors, keys []int) []sub {
	t.Helper()
	return makeSubs(t, parent, name, splitMembers(colors, keys),
		func(ctx context.Context, r int, s pg.Splitter) (pg.ProcessGroup, error) {
			return s.Split(ctx, colors[r], keys[r])
		})
}

// splitMembers is the reference for Split: the ranks of each color,
// ordered by key and then by rank, colors in ascending order; NoColor
// ranks are in none.
func splitMembers(colors, keys []int) [][]int {
	byColor := map[int][]int{}
	for r, c := range colors {
		if c != pg.NoColor {
			byColor[c] = append(byColor[c], r)
		}
	}
	var out [][]int
	for _, c := range slices.Sorted(mapKeys(byColor)) {
		rs := byColor[c]
		slices.SortStableFunc(rs, func(a, b int) int { return cmp.Or(cmp.Compare(keys[a], keys[b]), cmp.Compare(a, b)) })
		out = append(out, rs)
	}
	return out
}

func mapKeys(m map[int][]int) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func reversed(s []int) []int {
	s = slices.Clone(s)
	slices.Reverse(s)
	return s
}

// firstIsOne checks that each new subgroup numbers its first collective,
// a barrier, 1.
func firstIsOne(t *testing.T, parent *world, subs []sub) {
	t.Helper()
	for _, s := range subs {
		what := fmt.Sprintf("world=%d %s: first collective", parent.n, s.name)
		ctx, cancel := context.WithTimeout(context.Background(), s.w.limit)
		works := issue(s.w, nil, func(r int, g pg.ProcessGroup) pg.Work { return g.Barrier(ctx) })
		for r, err := range s.w.wait(t, what, works) {
			if !s.w.holds(r) {
				continue
			}
			if err != nil {
				t.Errorf("%s: subgroup rank %d: %v", what, r, err)
			} else if works[r].Seq() != 1 {
				t.Errorf("%s: subgroup rank %d: Seq %d, want 1: a subgroup numbers its own collectives", what, r, works[r].Seq())
			}
		}
		cancel()
	}
}

// checkSubs runs collectives on the parent and on every subgroup, all in
// flight at once: each parent rank issues its share, even ranks the
// parent's first and odd ranks the subgroups' first, in reverse order.
// With p2p every group also shifts a tensor around its ring.
func checkSubs(t *testing.T, parent *world, subs []sub, p2p bool) {
	t.Helper()
	type placed struct {
		w       *world
		members []int
		trials  []trial
	}
	groupTrials := func(w *world, seed uint64) []trial {
		trials := []trial{
			allReduceTrial(w, pg.Int64, pg.Op(pg.Sum), 100, seed),
			allToAllTrial(w, pg.Float32, randomSplits(w.n, 50, seed), 0, seed),
			reduceTrial(w, pg.Float32, pg.Op(pg.Avg), w.n-1, 33, seed),
			broadcastTrial(w, pg.Uint8, w.n/2, 65),
		}
		if p2p {
			trials = append(trials, ringTrial(w, pg.Int32, 40, 5, seed))
		}
		return trials
	}
	all := []placed{{parent, allRanks(parent.n), groupTrials(parent, 0)}}
	for i, s := range subs {
		all = append(all, placed{s.w, s.members, groupTrials(s.w, uint64(i+1))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), parent.limit)
	defer cancel()
	works := make([][][]pg.Work, len(all)) // [group][trial][group rank]
	for i, p := range all {
		works[i] = make([][]pg.Work, len(p.trials))
		for j := range p.trials {
			works[i][j] = make([]pg.Work, p.w.n)
		}
	}
	issue(parent, nil, func(r int, _ pg.ProcessGroup) struct{} {
		order := allRanks(len(all))
		if r%2 == 1 {
			order = reversed(order)
		}
		for _, i := range order {
			p := all[i]
			sr := slices.Index(p.members, r)
			if sr < 0 {
				continue
			}
			for j, tr := range p.trials {
				works[i][j][sr] = tr.issue(ctx, sr, p.w.groups[sr])
			}
		}
		return struct{}{}
	})
	for i, p := range all {
		for j, tr := range p.trials {
			what := tr.what
			if i > 0 {
				what = fmt.Sprintf("%s in %s, in flight with the parent's", tr.what, subs[i-1].name)
			}
			ok := true
			for r, err := range p.w.wait(t, what, works[i][j]) {
				if err != nil {
					t.Errorf("%s: rank %d: %v", what, r, err)
					ok = false
				}
			}
			if ok {
				tr.verify(t)
			}
		}
	}
}

// newGroupAmidCollectives: every rank issues an allreduce, creates a
// subgroup (a collective of the parent, so in the same order) while the
// allreduce may still be in flight, and issues another; all must finish
// right, and the subgroup must work.
func newGroupAmidCollectives(t *testing.T, w *world) {
	before := allReduceTrial(w, pg.Float64, pg.Op(pg.Sum), 5000, 1)
	after := allToAllTrial(w, pg.Int32, randomSplits(w.n, 200, 2), 0, 2)
	ranks := reversed(allRanks(w.n))
	what := fmt.Sprintf("world=%d NewGroup(%v) between two collectives in flight", w.n, ranks)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	type result struct {
		before, after pg.Work
		sub           pg.ProcessGroup
		err           error
	}
	res := issue(w, nil, func(r int, g pg.ProcessGroup) result {
		var x result
		x.before = before.issue(ctx, r, g)
		x.sub, x.err = g.(pg.Splitter).NewGroup(ctx, ranks)
		x.after = after.issue(ctx, r, g)
		return x
	})
	subs := make([]pg.ProcessGroup, w.n)
	for r, x := range res {
		subs[len(ranks)-1-r] = x.sub
	}
	t.Cleanup(func() { closeAll(t, subs, w.limit) })
	for i, tr := range []trial{before, after} {
		works := make([]pg.Work, w.n)
		for r, x := range res {
			works[r] = [2]pg.Work{x.before, x.after}[i]
		}
		ok := true
		for r, err := range w.wait(t, what+": "+tr.what, works) {
			if err != nil {
				t.Errorf("%s: %s: rank %d: %v", what, tr.what, r, err)
				ok = false
			}
		}
		if ok {
			tr.verify(t)
		}
	}
	for r, x := range res {
		if !w.holds(r) {
			continue
		}
		if x.err != nil || x.sub == nil || x.sub.Rank() != len(ranks)-1-r {
			t.Fatalf("%s: rank %d: got %s, error %v; want rank %d of the subgroup", what, r, describe(x.sub), x.err,
				len(ranks)-1-r)
		}
	}
	sw := &world{groups: subs, n: w.n, timeout: w.timeout, limit: w.limit}
	tr := broadcastTrial(sw, pg.Float16, 0, 99)
	tr.what = what + ", then " + tr.what + " in the subgroup"
	sw.try(t, tr)
}
