package pgtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/ddp/pg"
)

// runExtended checks the collectives of pg.Extended: on every world of the
// grid, then the 16 MiB cases, sequence numbers and completion hooks on
// fresh worlds, and the failures.
func runExtended(t *testing.T, newWorld World, g grid) {
	for _, n := range g.worlds {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			w := open(t, newWorld, n, correctTimeout)
			requireExtended(t, w)
			extendedCollectives(t, w, g)
		})
	}
	t.Run("Large", func(t *testing.T) {
		for _, n := range g.heavyWorlds {
			t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
				w := open(t, newWorld, n, correctTimeout)
				requireExtended(t, w)
				large(t, w)
			})
		}
	})
	t.Run("Seq", func(t *testing.T) {
		for _, n := range g.seqWorlds {
			t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
				w := open(t, newWorld, n, correctTimeout)
				requireExtended(t, w)
				seqAndHooks(t, w)
			})
		}
	})
	t.Run("Faults", func(t *testing.T) { runExtendedFaults(t, newWorld, g) })
}

// extendedCollectives runs the checks of one world. Point-to-point comes
// last: a backend that hangs in it times its world out, and that should
// not hide how it does in the rest.
func extendedCollectives(t *testing.T, w *world, g grid) {
	lengths := g.extLengths(w.n)
	t.Run("Reduce", func(t *testing.T) { reduce(t, w, lengths) })
	t.Run("Gather", func(t *testing.T) { gather(t, w, lengths) })
	t.Run("Scatter", func(t *testing.T) { scatter(t, w, lengths) })
	t.Run("AllToAll", func(t *testing.T) { allToAll(t, w, lengths) })
	t.Run("AllToAll/uneven", func(t *testing.T) { allToAllUneven(t, w, g.splitSeeds) })
	t.Run("Coalesced", func(t *testing.T) { coalesced(t, w, lengths) })
	t.Run("StartCoalescing", func(t *testing.T) { startCoalescing(t, w) })
	t.Run("invalid", func(t *testing.T) { invalidExtended(t, w) })
	t.Run("NewGroup", func(t *testing.T) { newGroups(t, w) })
	t.Run("NewGroup/amid-collectives", func(t *testing.T) { newGroupAmidCollectives(t, w) })
	t.Run("Split", func(t *testing.T) { splits(t, w, false) })
	t.Run("InFlight32", func(t *testing.T) { mixedInFlight(t, w, 32, uint64(w.n), false) })
	t.Run("SendRecv", func(t *testing.T) { sendRecvRing(t, w, g.messages, g.orderedP2P) })
	t.Run("SendRecv/amid-collectives", func(t *testing.T) { sendRecvAmidCollectives(t, w, g.orderedP2P) })
	t.Run("SendRecv/overtaking", func(t *testing.T) {
		if g.orderedP2P {
			t.Skip("Options.OrderedPointToPoint: sends and receives match in order, not by tag")
		}
		sendRecvOvertaking(t, w)
	})
	t.Run("SendRecv/subgroups", func(t *testing.T) { splits(t, w, true) })
	t.Run("InFlight32/with-p2p", func(t *testing.T) { mixedInFlight(t, w, 32, uint64(w.n)+100, true) })
}

// extendedInterfaces names the interfaces that make up pg.Extended, with a
// check for each.
func extendedInterfaces() []struct {
	name string
	has  func(pg.ProcessGroup) bool
} {
	return []struct {
		name string
		has  func(pg.ProcessGroup) bool
	}{
		{"pg.MonitoredBarrierer", func(g pg.ProcessGroup) bool { _, ok := g.(pg.MonitoredBarrierer); return ok }},
		{"pg.Backender", func(g pg.ProcessGroup) bool { _, ok := g.(pg.Backender); return ok }},
		{"pg.Rooted", func(g pg.ProcessGroup) bool { _, ok := g.(pg.Rooted); return ok }},
		{"pg.AllToAller", func(g pg.ProcessGroup) bool { _, ok := g.(pg.AllToAller); return ok }},
		{"pg.PointToPoint", func(g pg.ProcessGroup) bool { _, ok := g.(pg.PointToPoint); return ok }},
		{"pg.Coalescer", func(g pg.ProcessGroup) bool { _, ok := g.(pg.Coalescer); return ok }},
		{"pg.Splitter", func(g pg.ProcessGroup) bool { _, ok := g.(pg.Splitter); return ok }},
		{"pg.CompletionHooker", func(g pg.ProcessGroup) bool { _, ok := g.(pg.CompletionHooker); return ok }},
	}
}

// notExtended describes why g is not a pg.Extended, or returns nil.
func notExtended(g pg.ProcessGroup) error {
	if _, ok := g.(pg.Extended); ok {
		return nil
	}
	var missing []string
	for _, i := range extendedInterfaces() {
		if !i.has(g) {
			missing = append(missing, i.name)
		}
	}
	return fmt.Errorf(
		"pgtest: %T (backend %q) does not implement pg.Extended: it lacks %s; every backend must offer the whole set",
		g, pg.BackendName(g), strings.Join(missing, ", "))
}

// requireExtended fails t unless every group of w implements pg.Extended.
func requireExtended(t testing.TB, w *world) {
	t.Helper()
	for r, g := range w.groups {
		if !w.holds(r) {
			continue
		}
		if err := notExtended(g); err != nil {
			t.Fatalf("world=%d rank %d: %v", w.n, r, err)
		}
	}
}

// onExt adapts an issue function of pg.Extended groups to a trial's. A
// group that is not one gets a failed Work that says so.
func onExt(f func(ctx context.Context, r int, x pg.Extended) pg.Work) func(ctx context.Context, r int,
	g pg.ProcessGroup) pg.Work {
	return func(ctx context.Context, r int, g pg.ProcessGroup) pg.Work {
		x, ok := g.(pg.Extended)
		if !ok {
			return pg.Completed(notExtended(g))
		}
		return f(ctx, r, x)
	}
}

// tryAll issues every trial on every rank, in the same order everywhere,
// before waiting for any of them; then it judges those whose every rank
// succeeded.
func (w *world) tryAll(t testing.TB, trials []trial) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	works := issue(w, nil, func(r int, g pg.ProcessGroup) []pg.Work {
		ws := make([]pg.Work, len(trials))
		for i, tr := range trials {
			ws[i] = tr.issue(ctx, r, g)
		}
		return ws
	})
	for i, tr := range trials {
		what := tr.what
		if len(trials) > 1 {
			what = fmt.Sprintf("%s (#%d of %d in flight)", tr.what, i, len(trials))
		}
		ok := true
		for r, err := range w.wait(t, what, column(works, i)) {
			if err != nil {
				t.Errorf("%s: rank %d: %v", what, r, err)
				ok = false
			}
		}
		sameSeq(t, what, column(works, i))
		if ok {
			tr.verify(t)
		}
	}
	// Each rank's collectives must be numbered one after another, in the
	// order issued (the Works of point-to-point pairs have Seq 0).
	var seqs []uint64
	first := max(w.first(), 0)
	for _, wk := range works[first] {
		if s := wk.Seq(); s != 0 {
			seqs = append(seqs, s)
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Errorf("world=%d: %d collectives in flight: rank %d's Works have Seqs %v in the order issued; want consecutive "+
				"numbers", w.n, len(trials), first, seqs)
			break
		}
	}
}

// joined is the Work of several Works issued together: it finishes when
// they all have, with the first error in order. Its Seq is 0.
func joined(works ...pg.Work) pg.Work {
	f := pg.NewFuture()
	go func() {
		var first error
		for _, w := range works {
			<-w.Done()
			if err := w.Err(); err != nil && first == nil {
				first = err
			}
		}
		f.Complete(first)
	}()
	return f
}

// unchanged reports, as test failures, every rank whose tensor is no
// longer bit for bit what it was before the collective.
func (w *world) unchanged(t testing.TB, what, which string, got, before []pg.Tensor, skip func(r int) bool) {
	t.Helper()
	for r := range got {
		if !w.holds(r) || skip != nil && skip(r) {
			continue
		}
		if i := firstDiff(got[r], before[r]); i >= 0 {
			t.Errorf("%s: rank %d: its %s changed: element %d is %s, was %s", what, r, which, i, element(got[r], i),
				element(before[r], i))
		}
	}
}

// clones copies every tensor.
func clones(ts []pg.Tensor) []pg.Tensor {
	out := make([]pg.Tensor, len(ts))
	for i, t := range ts {
		out[i] = clone(t)
	}
	return out
}

// recorder collects the WorkInfos a completion hook sees.
type recorder struct {
	mu    sync.Mutex
	infos []pg.WorkInfo
	kick  chan struct{}
	// works are the Works issued, by op and seq, so that the hook can
	// check that each is done when it is reported; early lists the
	// reports of Works not yet done.
	works map[hookKey]pg.Work
	early []pg.WorkInfo
}

// hookKey identifies a Work in a completion report.
type hookKey struct {
	op  pg.OpType
	seq uint64
}

func newRecorder() *recorder {
	return &recorder{kick: make(chan struct{}, 1), works: map[hookKey]pg.Work{}}
}

// issued notes w, of op, so that its report can be checked.
func (c *recorder) issued(op pg.OpType, w pg.Work) {
	c.mu.Lock()
	c.works[hookKey{op, w.Seq()}] = w
	c.mu.Unlock()
}

func (c *recorder) hook(info pg.WorkInfo) {
	c.mu.Lock()
	c.infos = append(c.infos, info)
	if w, ok := c.works[hookKey{info.Op, info.Seq}]; ok && !isDone(w) {
		c.early = append(c.early, info)
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// await waits until the hook has seen at least n WorkInfos or ctx ends,
// and returns what it has seen.
func (c *recorder) await(ctx context.Context, n int) []pg.WorkInfo {
	for {
		c.mu.Lock()
		got := len(c.infos)
		c.mu.Unlock()
		if got >= n {
			break
		}
		select {
		case <-c.kick:
		case <-ctx.Done():
			c.mu.Lock()
			defer c.mu.Unlock()
			return append([]pg.WorkInfo(nil), c.infos...)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]pg.WorkInfo(nil), c.infos...)
}
