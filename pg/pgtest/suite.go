package pgtest

import (
	"fmt"
	"testing"
	"time"
)

// Timeouts the suite gives the worlds it makes.
const (
	// correctTimeout is the group timeout of worlds that check results:
	// long, so that a slow machine under the race detector never trips it.
	correctTimeout = 2 * time.Minute
	// faultTimeout is the group timeout of worlds that check failures.
	faultTimeout = 2 * time.Second
)

// Run is the conformance suite every process-group backend runs:
//
//	func TestConformance(t *testing.T) { pgtest.Run(t, newWorld) }
//
// It checks AllReduce (every dtype and op, and the invalid combinations),
// Broadcast from every root, AllGather, ReduceScatter and Barrier on
// worlds of 1 to 8 ranks, with lengths from 0 up to 64 MiB; 16
// collectives in flight at once; and failures: a rank that closes or
// aborts mid-collective, a rank that never arrives, and MonitoredBarrier
// when the group has it. Float results must be within Tolerance of a
// serial Reduce, integers equal to it bit for bit, and every rank's
// AllReduce result bit for bit the same as every other rank's.
//
// Under "Extended" it checks the whole of pg.Extended, which every group
// must implement (the subtests fail naming the interfaces it lacks), with
// c10d's semantics, on worlds of 1 to 8 ranks:
//   - Reduce with every dtype and valid op from every root (the other
//     ranks' tensors unchanged); Gather and Scatter from every root, with
//     full and empty buffers off the root; AllToAll with equal chunks and
//     with uneven splits drawn from a seeded RNG, empty chunks included;
//   - Send and Recv around a ring in both directions at once, on several
//     tags, several messages per tag received in the order sent; amid
//     collectives issued at a different point on every rank; a message
//     on one tag not holding up a later one on another; in subgroups;
//   - AllReduceCoalesced, AllGatherCoalesced and ReduceScatterCoalesced
//     (every dtype and op, one batch of mixed dtypes), pg.StartCoalescing
//     and its refusal of mixed batches;
//   - Work.Seq (collectives 1, 2, 3... on every rank, refused calls 0,
//     sends and receives numbered per peer and direction) and
//     OnCompletion (every Work reported once, after it is done, with its
//     op, seq, rank, dtype and sizes; a blocked hook holds up nothing),
//     on fresh worlds;
//   - NewGroup and Split (nested too, and between collectives in flight):
//     member ranks and order, nil for non-members, a subgroup's own
//     numbering from 1, and collectives of the parent and of every
//     subgroup in flight at once;
//   - 32 collectives of every kind, drawn from a seeded RNG, in flight,
//     without and with point-to-point pairs; 16 MiB Reduce, Gather,
//     Scatter, AllToAll, Send/Recv and AllReduceCoalesced on 2 and 4 ranks;
//   - refusals with pg.ErrInvalidArgument (bad roots, splits, peers,
//     tags, coalesced lists, rank lists); and failures: a rank that closes
//     or aborts its subgroup fails that subgroup's collective on the
//     others naming it (and their hooks see it), while the parent and a
//     subgroup without it go on; a subgroup times out with its parent's
//     timeout and outlives its closed parent; a Recv whose sender closes
//     or aborts fails naming it, and one with no sender times out; a Send
//     and Recv of different sizes fail with pg.ErrInvalidArgument on both
//     sides; alltoall splits that disagree between ranks fail the
//     receiver; a gather whose root refuses its arguments hangs no one.
//
// Under "Misuse" (RunMisuse) it makes bad calls on worlds of 1 to 3
// ranks: a nil ctx on every method, tensors without a dtype or the data
// the collective needs, roots, ops, colors and rank lists that do not
// exist, and every call after Close. Each must fail at once, with
// pg.ErrInvalidArgument (pg.ErrClosed once closed), without a panic or a
// hang, and leave the group working.
//
// Point-to-point checks come last in each world, so that a backend that
// hangs in them still gets its other results. RunWith relaxes the suite
// for backends with documented departures from the contracts.
//
// Under -short it checks worlds of 1, 2, 3, 4 and 8 ranks with shorter
// tensors, skips the 64 MiB AllReduce and runs the 16 MiB cases on 2
// ranks only.
func Run(t *testing.T, newWorld World) { RunWith(t, newWorld, Options{}) }

// Options adapt Run to a backend's documented departures from the pg
// contracts. The zero value is Run's full contract; every field relaxes
// it and should be justified in the backend's documentation.
type Options struct {
	// OrderedPointToPoint is for backends whose Send and Recv match in
	// the order issued between two ranks whatever the tag, as NCCL's and
	// c10d's ProcessGroupNCCL do, and must be issued in the same order as
	// collectives on every rank. The suite then posts receives in the
	// order of the sends, issues collectives at the same point among
	// point-to-point calls on every rank, and skips the check that a
	// message on one tag does not hold up a later one on another.
	OrderedPointToPoint bool
	// UncheckedAllToAllSplits is for backends that cannot detect an
	// alltoall whose split sizes disagree between ranks, as real NCCL
	// and c10d's ProcessGroupNCCL cannot (sends and receives pair by
	// order and count only): the suite skips the
	// Faults/AllToAll/InconsistentSplits subtests.
	UncheckedAllToAllSplits bool
}

// RunWith is Run with opts.
func RunWith(t *testing.T, newWorld World, opts Options) {
	g := newGrid(testing.Short())
	g.orderedP2P = opts.OrderedPointToPoint
	g.uncheckedSplits = opts.UncheckedAllToAllSplits
	t.Run("Collectives", func(t *testing.T) {
		for _, n := range g.worlds {
			t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
				runCollectives(t, open(t, newWorld, n, correctTimeout), g)
			})
		}
	})
	t.Run("Large", func(t *testing.T) {
		if testing.Short() {
			t.Skip("the 64 MiB AllReduce is skipped under -short")
		}
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("world=%d/float32/SUM/64MiB", n), func(t *testing.T) {
				largeAllReduce(t, open(t, newWorld, n, correctTimeout))
			})
		}
	})
	t.Run("Faults", func(t *testing.T) { runFaults(t, newWorld) })
	t.Run("Misuse", func(t *testing.T) { RunMisuse(t, newWorld) })
	t.Run("Extended", func(t *testing.T) { runExtended(t, newWorld, g) })
}

// RunMisuse is the part of Run that checks bad calls, for wrappers of a
// backend (pg/desync, pg/instrument) that run it without the rest. On
// worlds of 1, 2 and 3 ranks, every call with a nil ctx, tensors without
// a dtype or without the data the collective needs, or a root, op, color
// or rank list that does not exist must fail at once with
// pg.ErrInvalidArgument and Seq 0 on every rank, and the group must then
// still work; once every rank is closed, every call must fail with
// pg.ErrClosed, and Abort and a second Close must return. No call may
// panic or hang: each is made in a goroutine of its own and bounded by
// the group timeout plus 30 seconds. Groups that implement pg.Extended
// get every call; others (a wrapper that is only a pg.ProcessGroup) get
// the calls of pg.ProcessGroup.
func RunMisuse(t *testing.T, newWorld World) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			w := open(t, newWorld, n, faultTimeout)
			t.Run("open", func(t *testing.T) { misuse(t, w) })
			if w.hung {
				t.Fatal("not checking the calls after Close: a call hung, and Close would too")
			}
			t.Run("closed", func(t *testing.T) { afterClose(t, w) })
		})
	}
}

func runCollectives(t *testing.T, w *world, g grid) {
	lengths := g.lengths(w.n)
	t.Run("AllReduce", func(t *testing.T) { allReduce(t, w, lengths) })
	t.Run("AllReduce/invalid", func(t *testing.T) { invalidAllReduce(t, w) })
	t.Run("Broadcast", func(t *testing.T) { broadcast(t, w, g.shortLengths()) })
	t.Run("AllGather", func(t *testing.T) { allGather(t, w, lengths) })
	t.Run("ReduceScatter", func(t *testing.T) { reduceScatter(t, w, g.shortLengths()) })
	t.Run("invalid", func(t *testing.T) { invalidArguments(t, w) })
	t.Run("Barrier", func(t *testing.T) { barrier(t, w) })
	t.Run("InFlight16", func(t *testing.T) { inFlight(t, w, 16) })
}

// grid is how much of the space the suite covers.
type grid struct {
	worlds  []int
	longest int // the longest tensor of the small-tensor checks

	heavyWorlds []int // the worlds of the 16 MiB pg.Extended checks
	seqWorlds   []int // the fresh worlds of the sequence-number checks
	splitSeeds  int   // random uneven alltoalls per dtype
	messages    int   // messages per tag and direction in the send/recv ring
	orderedP2P  bool  // Options.OrderedPointToPoint

	uncheckedSplits bool // Options.UncheckedAllToAllSplits
}

func newGrid(short bool) grid {
	if short {
		return grid{worlds: []int{1, 2, 3, 4, 8}, longest: 4099,
			heavyWorlds: []int{2}, seqWorlds: []int{1, 2, 4}, splitSeeds: 2, messages: 2}
	}
	return grid{worlds: []int{1, 2, 3, 4, 5, 6, 7, 8}, longest: 65537,
		heavyWorlds: []int{2, 4}, seqWorlds: []int{1, 2, 3, 5, 8}, splitSeeds: 3, messages: 3}
}

// lengths are the tensor lengths checked on a world of n ranks: empty,
// shorter than the world, odd, not divisible by n, divisible by n, and
// longer than one of the kernels' blocks.
func (g grid) lengths(n int) []int {
	ls := []int{0, 1, 2, 7, 3*n + 1, 64 * n, 4099}
	if g.longest > 4099 {
		ls = append(ls, g.longest)
	}
	return ls
}

// extLengths are the lengths of the pg.Extended checks, which loop over
// roots, ops or tensors in a batch: lengths without the longest, or
// shortLengths under -short.
func (g grid) extLengths(n int) []int {
	if g.longest <= 4099 {
		return g.shortLengths()
	}
	return []int{0, 1, 2, 7, 3*n + 1, 64 * n, 4099}
}

// shortLengths are the lengths of checks that multiply them by a loop over
// roots or by the world size.
func (g grid) shortLengths() []int { return []int{0, 1, 7, 1000} }
