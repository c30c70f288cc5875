package local

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// NewGroup and Split are collectives of the parent: each takes one slot
// and one sequence number, an allgather of the ranks lists or of the
// (color, key) pairs. When the last rank arrives, the slot makes one new
// world per subgroup, so every member finds the same one; each member
// then starts its own Group (worker, completion hooks) on it. A subgroup
// shares nothing else with its parent: its own slots and sequence
// numbers, the parent's timeout and logger.

// subResult is what a new_group or Split slot hands rank r: its world and
// rank there, or a nil world when r is not a member.
type subResult struct {
	w    *world
	rank int
}

// NewGroup is c10d's new_group(ranks): every rank of g calls it with the
// same ranks, and rank ranks[i] gets rank i of the new group. Ranks that
// are not listed get nil and no error. Ranks that pass different lists
// fail with pg.ErrMismatch.
func (g *Group) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	if _, err := backend.CheckNewGroup(ranks, g.rank, g.Size()); err != nil {
		return nil, fmt.Errorf("local: %v on rank %d: %w", opNewGroup, g.rank, err)
	}
	d := desc{kind: opNewGroup, dtype: pg.Int64, len: len(ranks)}
	return g.subgroup(ctx, d, args{ranks: slices.Clone(ranks)})
}

// Split is ncclCommSplit: ranks that pass the same color form a group,
// ordered by key and then by rank in g. A rank that passes pg.NoColor
// gets nil and no error.
func (g *Group) Split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	if color < pg.NoColor {
		return nil, fmt.Errorf("local: %v on rank %d: %w: color %d is negative; pass a color >= 0, or pg.NoColor to stay out",
			opSplit, g.rank, pg.ErrInvalidArgument, color)
	}
	return g.subgroup(ctx, desc{kind: opSplit, dtype: pg.Int64}, args{color: color, key: key})
}

// subgroup runs the agreeing collective and starts this rank's Group on
// the world it hands back.
func (g *Group) subgroup(ctx context.Context, d desc, a args) (pg.ProcessGroup, error) {
	a.sub = &subResult{}
	w := g.submit(ctx, &task{desc: d, args: a, timeout: g.timeout})
	// The collective is bounded by ctx and the group timeout, and once it
	// succeeds on one rank every member's world exists: wait for it whole,
	// so that no member is left out of a world its peers use.
	<-w.Done()
	if err := w.Err(); err != nil {
		return nil, err
	}
	if a.sub.w == nil {
		return nil, nil
	}
	return startGroup(a.sub.w, a.sub.rank, g.timeout, g.base), nil
}

// ranksDisagree compares two ranks' new_group lists (their lengths are in
// desc).
func ranksDisagree(a, b int, ra, rb []int) string {
	if !slices.Equal(ra, rb) {
		return fmt.Sprintf("new_group: rank %d passed ranks %v but rank %d passed %v", a, ra, b, rb)
	}
	return ""
}

// makeSubworlds makes the worlds of a new_group or Split slot every rank
// has arrived in, and returns each parent rank's place in them.
func makeSubworlds(as []args, k opKind) []subResult {
	subs := make([]subResult, len(as))
	if k == opNewGroup {
		members := as[0].ranks
		w := newWorld(len(members), slices.Clone(members))
		for i, r := range members {
			subs[r] = subResult{w: w, rank: i}
		}
		return subs
	}
	byColor := make(map[int][]int)
	for r, a := range as {
		if a.color != pg.NoColor {
			byColor[a.color] = append(byColor[a.color], r)
		}
	}
	for _, members := range byColor {
		slices.SortStableFunc(members, func(x, y int) int { return cmp.Compare(as[x].key, as[y].key) })
		w := newWorld(len(members), members)
		for i, r := range members {
			subs[r] = subResult{w: w, rank: i}
		}
	}
	return subs
}
