package desync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// tcpWorld starts n TCP ranks on loopback in this process, wrapped over
// one in-memory store.
func tcpWorld(t *testing.T, n int, timeout time.Duration, opts Options, tweaks ...func(*tcp.Options)) []*Group {
	t.Helper()
	st := store.NewHashStore(store.HashStoreOptions{})
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			o := tcp.Options{Rank: r, Size: n, Secret: []byte("desync-test-secret-0123456789abc"),
				ListenAddr: "127.0.0.1:0", Timeout: timeout}
			for _, tweak := range tweaks {
				tweak(&o)
			}
			g, err := tcp.New(ctx, st, o)
			if err != nil {
				errs[r] = err
				return
			}
			gs[r], errs[r] = Wrap(g, st, opts)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, g := range gs {
			if g != nil {
				g.Close()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return gs
}

// Over real sockets, where the ranks that wait fail with a timeout or with
// the relayed remote error of whoever timed out first (and blame whoever
// they were waiting on), every one names the rank that never issued.
func TestTCPBehindRankIsNamed(t *testing.T) {
	gs := tcpWorld(t, 3, 500*time.Millisecond, Options{DiagnosisTimeout: 2 * time.Second, StoreHost: pg.NoPeer})
	if errs := onRanks(gs, []int{0, 1, 2}, allReduce(1000)); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	errs := onRanks(gs, []int{0, 1}, allReduce(1000))
	for _, r := range []int{0, 1} {
		se := stallOf(t, r, errs[r])
		if !slices.Equal(se.Culprits(), []int{2}) || !slices.Equal(se.Behind, []int{2}) {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		want := fmt.Sprintf("pg: rank 2 is behind (its last collective is allreduce #1; it never entered #2) while rank %d "+
			"waited in allreduce #2", r)
		if !strings.HasPrefix(errs[r].Error(), want) {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
}

// With CheckCollectives over TCP, a length mismatch is an error on every
// rank, not a hang or a garbled buffer.
func TestTCPMismatch(t *testing.T) {
	gs := tcpWorld(t, 3, 5*time.Second, Options{CheckCollectives: true})
	errs := onRanks(gs, []int{0, 1, 2}, func(g *Group) error {
		if g.Rank() == 1 {
			return allReduce(999)(g)
		}
		return allReduce(1000)(g)
	})
	for r, err := range errs {
		var me *pg.MismatchError
		if !errors.As(err, &me) || !slices.Equal(me.Differ, []int{1}) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if errs := onRanks(gs, []int{0, 1, 2}, allReduce(1000)); errors.Join(errs...) != nil {
		t.Fatalf("after the mismatch: %v", errs)
	}
}

// Without the check, a desynchronisation over TCP hangs until the
// timeout; the diagnosis then finds it: rank 2 issued a broadcast where
// the others issued an allreduce, and every rank says so.
//
// Over TCP the mismatched op is a stall to diagnose. Through shared memory
// (the default on one host) pg/tcp compares the calls itself and fails at
// once with ErrMismatch naming the peer, which the wrapper passes on as
// it is: TestShmDesyncCaughtByTransport.
func TestTCPDesyncDiagnosed(t *testing.T) {
	gs := tcpWorld(t, 3, 500*time.Millisecond, Options{DiagnosisTimeout: 2 * time.Second},
		func(o *tcp.Options) { o.NoSharedMemory = true })
	ctx := context.Background()
	errs := onRanks(gs, []int{0, 1, 2}, func(g *Group) error {
		if g.Rank() == 2 {
			return g.Broadcast(ctx, pg.Float32s(make([]float32, 1000)), 0).Wait(ctx)
		}
		return allReduce(1000)(g)
	})
	for r, err := range errs {
		se := stallOf(t, r, err)
		if !slices.Equal(se.Mismatched, []int{2}) || len(se.Behind)+len(se.Silent) != 0 {
			t.Fatalf("rank %d: %v", r, err)
		}
		want := "pg: rank 2 issued broadcast(float32 x1000, root 0) as #1 where rank 0 issued allreduce(float32 x1000, " +
			"SUM) while rank " + fmt.Sprint(r) + " waited in "
		if !strings.HasPrefix(err.Error(), want) ||
			!strings.Contains(err.Error(), "; make every rank issue the same collectives in the same order") {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestShmDesyncCaughtByTransport is TestTCPDesyncDiagnosed's desync with
// shared memory on: every rank fails at once (well within the group
// timeout) with pg.ErrMismatch, and the ranks that issued AllReduce name
// rank 2 and both calls.
func TestShmDesyncCaughtByTransport(t *testing.T) {
	gs := tcpWorld(t, 3, time.Minute, Options{DiagnosisTimeout: 2 * time.Second})
	ctx := context.Background()
	start := time.Now()
	errs := onRanks(gs, []int{0, 1, 2}, func(g *Group) error {
		if g.Rank() == 2 {
			return g.Broadcast(ctx, pg.Float32s(make([]float32, 1000)), 0).Wait(ctx)
		}
		return allReduce(1000)(g)
	})
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the mismatch took %v to surface", d)
	}
	for r, err := range errs {
		var se *pg.StallError
		if !errors.Is(err, pg.ErrMismatch) || errors.As(err, &se) {
			t.Fatalf("rank %d: got %v, want the transport's ErrMismatch", r, err)
		}
		if r == 2 {
			continue // it names whichever peer it compared first
		}
		for _, want := range []string{"with peer rank 2", "rank 2 issued broadcast of 4000 bytes of float32 from root 0",
			"where this rank issued allreduce of 4000 bytes of float32"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("rank %d: %q lacks %q", r, err, want)
			}
		}
	}
}

// A rank that dies inside a TCP subgroup (here: closes it) fails that
// subgroup on the other members, who name it as silent and gone by its
// subgroup and parent rank; the parent group keeps working.
func TestTCPDeadRankInSubgroup(t *testing.T) {
	gs := tcpWorld(t, 4, time.Second, Options{DiagnosisTimeout: time.Second, StoreHost: pg.NoPeer})
	if _, ok := gs[0].Inner().(pg.Splitter); !ok {
		t.Skip("the tcp backend has no NewGroup yet")
	}
	ctx := context.Background()
	subs := make([]pg.ProcessGroup, 4)
	errs := onRanks(gs, []int{0, 1, 2, 3}, func(g *Group) (err error) {
		subs[g.Rank()], err = g.NewGroup(ctx, []int{1, 2, 3})
		return err
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range subs {
			if s != nil {
				s.Close()
			}
		}
	}()
	subs[3].Close() // parent rank 3, subgroup rank 2, dies
	errs = onRanks(gs, []int{1, 2}, func(g *Group) error {
		return subs[g.Rank()].AllReduce(ctx, pg.Float32s(make([]float32, 8)), pg.Op(pg.Sum)).Wait(ctx)
	})
	for _, r := range []int{1, 2} {
		se := stallOf(t, r-1, errs[r])
		// Its listener is closed, so the probe finds the process gone
		// (pg's Note [network or process]).
		want := fmt.Sprintf("pg: rank 2 (parent rank 3) did not answer (gone: its host 127.0.0.1 refused the connection: "+
			"the process is gone) while rank %d of group world/1 waited in allreduce #1; check rank 2 (parent rank 3):", r-1)
		if !slices.Equal(se.Silent, []int{2}) || se.Progress[2].Reach != pg.ReachRefused ||
			!strings.HasPrefix(errs[r].Error(), want) {
			t.Fatalf("parent rank %d: %v", r, errs[r])
		}
	}
	if errs := onRanks(gs, []int{0, 1, 2, 3}, allReduce(8)); errors.Join(errs...) != nil {
		t.Fatalf("the parent failed after its subgroup did: %v", errs)
	}
}
