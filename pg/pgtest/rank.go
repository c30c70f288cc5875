package pgtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// RankOptions adapt RunRank to the group under test.
type RankOptions struct {
	Options
	// Timeout is the group's timeout; the suite calls a Work that has not
	// finished Timeout plus 30s after it was issued a hang. Zero means 2
	// minutes.
	Timeout time.Duration
}

// RunRank is the conformance suite for backends that hold one rank per
// process, as MPI launches them: every rank of the job calls it, with the
// same options, on its own rank of the job's group:
//
//	func TestConformance(t *testing.T) { pgtest.RunRank(t, worldGroup, pgtest.RankOptions{}) }
//
// Each rank makes every rank's inputs from the same seeds, so it knows the
// expected result from the serial references (Reduce, Gather, Scatter,
// AllToAll) without asking anyone, and checks its own output against it.
// Results that must be bit for bit the same on every rank (AllReduce and
// the coalesced AllReduce) are compared across ranks by allgathering a
// digest of each rank's result through the group itself.
//
// It runs the checks of Run that make sense on one rank of a world whose
// size the launcher chose: every dtype with every op and the invalid
// combinations, Broadcast, Reduce, Gather and Scatter from every root,
// AllGather, ReduceScatter, AllToAll with equal and uneven splits,
// lengths from 0 to 65537, Barrier, 16 and 32 collectives in flight,
// the coalesced collectives, Send and Recv around a ring on several tags,
// NewGroup and Split with subgroups in flight beside the parent, the
// refusals of invalid arguments, which must come on every rank without a
// hang, and (on a fresh NewGroup of every rank) Work.Seq and completion
// hooks; then RunMisuse's bad calls on g, and its calls after Close on a
// fresh NewGroup of every rank, which it closes. Under -short the lengths stop at 4099. The failures of Run's
// fault suite need a rank to close, abort or stay away, which ends an MPI
// job; see RunRankFault.
//
// Every rank must make the same calls in the same order, so a failure
// that stops one rank's checks early (t.Fatal) leaves the others waiting
// until the group times out. RunRank does not close g.
func RunRank(t *testing.T, g pg.ProcessGroup, opts RankOptions) {
	w := rankWorld(t, g, opts)
	gr := newGrid(testing.Short())
	gr.orderedP2P = opts.OrderedPointToPoint
	t.Run("Collectives", func(t *testing.T) { runCollectives(t, w, gr) })
	t.Run("Extended", func(t *testing.T) {
		requireExtended(t, w)
		extendedCollectives(t, w, gr)
	})
	t.Run("Extended/Seq", func(t *testing.T) {
		requireExtended(t, w)
		seqAndHooks(t, freshWorld(t, w))
	})
	t.Run("Misuse", func(t *testing.T) {
		misuse(t, w)
		afterClose(t, freshWorld(t, w))
	})
}

// freshWorld is a world on a new group of every rank of w
// (NewGroup(0..n-1)), whose collectives are numbered from 1 and whose
// completion hooks see only its own Works: the digests of its results are
// exchanged through w's groups instead. It is closed when t ends.
func freshWorld(t *testing.T, w *world) *world {
	t.Helper()
	all := allRanks(w.n)
	subs := makeSubs(t, w, fmt.Sprintf("NewGroup(%v)", all), [][]int{all},
		func(ctx context.Context, r int, s pg.Splitter) (pg.ProcessGroup, error) {
			return s.NewGroup(ctx, all)
		})
	fw := subs[0].w
	fw.ctl = w.groups
	return fw
}

// rankWorld is the world of which this process holds g's rank.
func rankWorld(t *testing.T, g pg.ProcessGroup, opts RankOptions) *world {
	t.Helper()
	if g == nil || g.Size() < 1 || g.Rank() < 0 || g.Rank() >= g.Size() {
		t.Fatalf("pgtest.RunRank: group is %s", describe(g))
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = correctTimeout
	}
	groups := make([]pg.ProcessGroup, g.Size())
	groups[g.Rank()] = g
	return &world{groups: groups, n: g.Size(), timeout: timeout, limit: timeout + 30*time.Second}
}

// RankFaults names the fault cases of RunRankFault. Each leaves the group
// timed out, which ends an MPI job (MPI_Abort), so each needs a job of its
// own.
func RankFaults() []string { return []string{"NoShow", "Subgroup/Timeout", "Recv/NoSender"} }

// RunRankFault runs the fault case name (one of RankFaults) on this
// process's rank of g, whose group timeout must be opts.Timeout (keep it
// short: the waiting ranks wait it out). Every rank of the job calls it:
//   - NoShow: the last rank never issues the allreduce the others wait
//     in; each of them must fail with pg.ErrTimeout after about the group
//     timeout (worlds of 2 ranks or more);
//   - Subgroup/Timeout: rank 2 never issues the allreduce that ranks 0
//     and 1 wait in on NewGroup([0 1 2]), which must time out with its
//     parent's timeout (3 ranks or more);
//   - Recv/NoSender: rank 1 receives from rank 0, which never sends; the
//     Recv must fail with pg.ErrTimeout (2 ranks or more).
//
// The ranks that stay away return at once; what happens to the group and
// the job after the timeout (an MPI backend aborts the job) is the
// caller's to check.
func RunRankFault(t *testing.T, g pg.ProcessGroup, name string, opts RankOptions) {
	w := rankWorld(t, g, opts)
	need := map[string]int{"NoShow": 2, "Subgroup/Timeout": 3, "Recv/NoSender": 2}
	n, ok := need[name]
	if !ok {
		t.Fatalf("pgtest.RunRankFault: no fault case %q; the cases are %v", name, RankFaults())
	}
	if w.n < n {
		t.Skipf("%s needs a world of %d ranks or more, not %d", name, n, w.n)
	}
	requireExtended(t, w)
	switch name {
	case "NoShow":
		noShow(t, w, w.n-1)
	case "Subgroup/Timeout":
		subgroupNoShow(t, w)
	case "Recv/NoSender":
		recvNoShow(t, w)
	}
}

// stayAway is what a rank that stays away from a fault case does in
// RunRankFault: it keeps its groups open until the others have had time
// to wait out the group timeout, so that they see a timeout, not a rank
// that left.
func (w *world) stayAway() { time.Sleep(w.timeout + 2*time.Second) }
