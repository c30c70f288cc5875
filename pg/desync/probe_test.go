package desync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/store"
)

// prober wraps a group and answers probes from a table, recording whom
// it was asked about and the longest deadline it was given.
type prober struct {
	pg.ProcessGroup
	reach   map[int]pg.Reach
	later   map[int]pg.Reach // what a rank's second and later probes find, where set
	mu      sync.Mutex
	asked   []int
	longest time.Duration
}

func (p *prober) Inner() pg.ProcessGroup { return p.ProcessGroup }

func (p *prober) ProbePeer(ctx context.Context, rank int) backend.Probe {
	d, _ := ctx.Deadline()
	p.mu.Lock()
	reach := p.reach[rank]
	if l, ok := p.later[rank]; ok && slices.Contains(p.asked, rank) {
		reach = l
	}
	p.asked = append(p.asked, rank)
	p.longest = max(p.longest, time.Until(d))
	p.mu.Unlock()
	return backend.Probe{Reach: reach, Addr: fmt.Sprintf("10.0.0.%d:4000", rank+1)}
}

func (p *prober) askedSorted() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(slices.Values(p.asked))
}

// probedWorld is world over local groups that probe through reach.
func probedWorld(t *testing.T, n int, opts Options, reach map[int]pg.Reach, st func(int) store.Store) ([]*Group,
	[]*prober) {
	t.Helper()
	inner, err := local.New(n, local.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gs, ps := make([]*Group, n), make([]*prober, n)
	for r := range gs {
		ps[r] = &prober{ProcessGroup: inner[r], reach: reach}
		if gs[r], err = Wrap(ps[r], st(r), opts); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs, ps
}

// What the probe found of a silent rank is in the diagnosis: a host
// that does not answer makes the rank unreachable and the advice is
// about the network. Probes are bounded by ProbeTimeout. A small group
// probes every other rank as the diagnosis starts; a large one only the
// silent ranks, after the wait.
func TestSilentRankIsProbed(t *testing.T) {
	t.Run("early", func(t *testing.T) { testSilentRankIsProbed(t, false, []int{1, 2}, []int{0, 2}) })
	t.Run("late", func(t *testing.T) { testSilentRankIsProbed(t, true, []int{2}, []int{2}) })
}

func testSilentRankIsProbed(t *testing.T, late bool, probed0, probed1 []int) {
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	elsewhere := store.NewHashStore(store.HashStoreOptions{})
	defer elsewhere.Close()
	opts := Options{DiagnosisTimeout: 500 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond, lateProbes: late}
	gs, ps := probedWorld(t, 3, opts, map[int]pg.Reach{0: pg.ReachAnswers, 1: pg.ReachAnswers, 2: pg.ReachNoHost},
		func(r int) store.Store {
			if r == 2 {
				return elsewhere // rank 2 never answers the diagnosis
			}
			return hs
		})
	errs := onRanks(gs, []int{0, 1}, allReduce(16))
	for _, r := range []int{0, 1} {
		se := stallOf(t, r, errs[r])
		if !slices.Equal(se.Silent, []int{2}) || !slices.Equal(se.Unreachable, []int{2}) ||
			se.Progress[2].Reach != pg.ReachNoHost || se.Progress[2].Addr != "10.0.0.3:4000" {
			t.Fatalf("rank %d: diagnosis %+v, want rank 2 silent and unreachable", r, se)
		}
		want := fmt.Sprintf("pg: rank 2 did not answer (unreachable: its host 10.0.0.3 does not answer: the network to it "+
			"is down or partitioned) while rank %d waited in allreduce #1; check the network between this host and 10.0.0.3 "+
			"(rank 2)", r)
		if !strings.HasPrefix(errs[r].Error(), want) {
			t.Fatalf("rank %d's message\n%s\ndoes not start with\n%s", r, errs[r], want)
		}
		if got, want := ps[r].askedSorted(), [][]int{probed0, probed1}[r]; !slices.Equal(got, want) {
			t.Fatalf("rank %d probed %v, want %v", r, got, want)
		}
		if ps[r].longest > opts.ProbeTimeout {
			t.Fatalf("rank %d's probes had %v, more than ProbeTimeout %v", r, ps[r].longest, opts.ProbeTimeout)
		}
	}
}

// When the store does not answer, every other rank is probed, early or
// late; those whose host does not answer are named, the others are not.
func TestDeadStoreProbesEveryRank(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprint("late=", late), func(t *testing.T) { testDeadStoreProbesEveryRank(t, late) })
	}
}

func testDeadStoreProbesEveryRank(t *testing.T, late bool) {
	reach := map[int]pg.Reach{0: pg.ReachRefused, 1: pg.ReachRefused, 2: pg.ReachNoHost, 3: pg.ReachNoHost}
	gs, ps := probedWorld(t, 4, Options{DiagnosisTimeout: 300 * time.Millisecond, StoreHost: 2, lateProbes: late}, reach,
		shared(deadStore{}))
	errs := onRanks(gs, []int{0, 1}, allReduce(4))
	for _, r := range []int{0, 1} {
		se := stallOf(t, r, errs[r])
		if !slices.Equal(se.Unreachable, []int{2, 3}) || !slices.Equal(se.Culprits(), []int{2, 3}) {
			t.Fatalf("rank %d: diagnosis %+v, want ranks 2, 3 unreachable and named", r, se)
		}
		want := fmt.Sprintf("pg: ranks 2, 3 cannot be reached (unreachable: their hosts 10.0.0.3, 10.0.0.4 do not answer: "+
			"the network to them is down or partitioned); the store did not answer (hosted by rank 2, which cannot be "+
			"reached) while rank %d waited in allreduce #1", r)
		if !strings.HasPrefix(errs[r].Error(), want) {
			t.Fatalf("rank %d's message\n%s\ndoes not start with\n%s", r, errs[r], want)
		}
		others := []int{0, 1, 2, 3}
		others = slices.Delete(others, r, r+1)
		if got := ps[r].askedSorted(); !slices.Equal(got, others) {
			t.Fatalf("rank %d probed %v, want every other rank %v", r, got, others)
		}
	}
}

// A silent rank whose host answered the early probe (its process still
// dying as the diagnosis began) is probed again once the wait is over,
// and what that finds is what the diagnosis says: gone, not stopped.
// TestNetbedFaults' "host's ranks killed" failed on it: two ranks killed
// one after the other, the second still alive at the first's early probe.
func TestSilentRankProbedAgainAfterTheWait(t *testing.T) {
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	elsewhere := store.NewHashStore(store.HashStoreOptions{})
	defer elsewhere.Close()
	opts := Options{DiagnosisTimeout: 300 * time.Millisecond, ProbeTimeout: 100 * time.Millisecond}
	gs, ps := probedWorld(t, 3, opts, map[int]pg.Reach{0: pg.ReachAnswers, 1: pg.ReachAnswers, 2: pg.ReachAnswers},
		func(r int) store.Store {
			if r == 2 {
				return elsewhere // rank 2 never answers the diagnosis
			}
			return hs
		})
	for _, p := range ps {
		p.later = map[int]pg.Reach{2: pg.ReachRefused}
	}
	errs := onRanks(gs, []int{0, 1}, allReduce(16))
	for _, r := range []int{0, 1} {
		se := stallOf(t, r, errs[r])
		if se.Progress[2].Reach != pg.ReachRefused {
			t.Fatalf("rank %d: rank 2's reach %v, want refused (the second probe's)", r, se.Progress[2].Reach)
		}
		if !strings.Contains(errs[r].Error(), "rank 2 did not answer (gone:") {
			t.Fatalf("rank %d's message does not say rank 2 is gone:\n%s", r, errs[r])
		}
		if got, want := ps[r].askedSorted(), []int{1 - r, 2, 2}; !slices.Equal(got, want) {
			t.Fatalf("rank %d probed %v, want %v (rank 2 again after the wait)", r, got, want)
		}
	}
}
