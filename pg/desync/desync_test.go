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
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/store"
)

// world starts n local ranks, each wrapped over st(rank), and closes them
// at the end of the test.
func world(t *testing.T, n int, timeout time.Duration, opts Options, st func(rank int) store.Store) []*Group {
	t.Helper()
	inner, err := local.New(n, local.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	gs := make([]*Group, n)
	for r := range gs {
		if gs[r], err = Wrap(inner[r], st(r), opts); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

func shared(st store.Store) func(int) store.Store { return func(int) store.Store { return st } }

// onRanks runs f on every listed rank at once and returns their errors,
// index = rank.
func onRanks(gs []*Group, ranks []int, f func(g *Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { errs[r] = f(gs[r]) })
	}
	wg.Wait()
	return errs
}

func allReduce(n int) func(g *Group) error {
	return func(g *Group) error {
		ctx := context.Background()
		return g.AllReduce(ctx, pg.Float32s(make([]float32, n)), pg.Op(pg.Sum)).Wait(ctx)
	}
}

func stallOf(t *testing.T, rank int, err error) *pg.StallError {
	t.Helper()
	var se *pg.StallError
	if !errors.As(err, &se) {
		t.Fatalf("rank %d: got %v, want a *pg.StallError", rank, err)
	}
	if se.Rank != rank {
		t.Fatalf("rank %d's StallError says rank %d", rank, se.Rank)
	}
	return se
}

// A rank that never issues a collective, but is alive, is named as
// behind by every rank that waited for it.
func TestBehindRankIsNamed(t *testing.T) {
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	gs := world(t, 3, 300*time.Millisecond, Options{DiagnosisTimeout: 2 * time.Second, StoreHost: pg.NoPeer}, shared(hs))
	if errs := onRanks(gs, []int{0, 1, 2}, allReduce(16)); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
	errs := onRanks(gs, []int{0, 1}, allReduce(16)) // rank 2 stalls before #2
	for _, r := range []int{0, 1} {
		se := stallOf(t, r, errs[r])
		if !slices.Equal(se.Behind, []int{2}) || len(se.Silent) != 0 || len(se.Mismatched) != 0 || se.StoreErr != nil {
			t.Fatalf("rank %d: diagnosis %+v, want rank 2 behind", r, se)
		}
		if se.Seq != 2 || se.Op != pg.OpAllReduce || !slices.Equal(se.Culprits(), []int{2}) {
			t.Fatalf("rank %d: %v #%d culprits %v", r, se.Op, se.Seq, se.Culprits())
		}
		if p := se.Progress[2]; !p.Answered || p.Entered != 1 || p.Finished != 1 {
			t.Fatalf("rank 2's progress %+v, want entered and finished #1", p)
		}
		if p := se.Progress[r]; p.Entered != 2 || p.Finished != 2 {
			t.Fatalf("rank %d's own progress %+v", r, p)
		}
		if !errors.Is(errs[r], pg.ErrTimeout) && !errors.Is(errs[r], pg.ErrRemote) {
			t.Fatalf("rank %d: %v matches none of timeout, comm, remote", r, errs[r])
		}
		msg := errs[r].Error()
		want := fmt.Sprintf("pg: rank 2 is behind (its last collective is allreduce #1; it never entered #2) while rank %d "+
			"waited in allreduce #2; check rank 2:", r)
		if !strings.HasPrefix(msg, want) {
			t.Fatalf("rank %d's message\n%s\ndoes not start with\n%s", r, msg, want)
		}
	}
	t.Log(errs[0])
	// A later collective fails with the same diagnosis.
	err := allReduce(16)(gs[0])
	if se := stallOf(t, 0, err); !slices.Equal(se.Culprits(), []int{2}) {
		t.Fatalf("later failure: %v", err)
	}
}

// A rank that does not answer the diagnosis (here: its responder watches
// another store, as a stopped process would not answer at all) is named
// as silent.
func TestSilentRankIsNamed(t *testing.T) {
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	elsewhere := store.NewHashStore(store.HashStoreOptions{})
	defer elsewhere.Close()
	gs := world(t, 3, 300*time.Millisecond, Options{DiagnosisTimeout: 500 * time.Millisecond}, func(r int) store.Store {
		if r == 2 {
			return elsewhere
		}
		return hs
	})
	errs := onRanks(gs, []int{0, 1}, allReduce(16))
	for _, r := range []int{0, 1} {
		se := stallOf(t, r, errs[r])
		if !slices.Equal(se.Silent, []int{2}) || len(se.Behind) != 0 || se.Progress[2].Answered {
			t.Fatalf("rank %d: diagnosis %+v, want rank 2 silent", r, se)
		}
		want := fmt.Sprintf("pg: rank 2 did not answer (stopped or dead) while rank %d waited in allreduce #1; check rank 2:",
			r)
		if !strings.HasPrefix(errs[r].Error(), want) {
			t.Fatalf("rank %d's message\n%s\ndoes not start with\n%s", r, errs[r], want)
		}
	}
}

// deadStore never answers, as a store whose host process is stopped.
type deadStore struct{ store.Store }

func (deadStore) Set(ctx context.Context, key string, value []byte) error {
	<-ctx.Done()
	return fmt.Errorf("%w: store: set %q: no answer", pg.ErrTimeout, key)
}

func (deadStore) Wait(ctx context.Context, keys ...string) error {
	<-ctx.Done()
	if errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	return fmt.Errorf("%w: store: wait %q: no answer", pg.ErrTimeout, keys)
}

// A store that does not answer is reported, and its host rank named.
func TestDeadStoreNamesItsHost(t *testing.T) {
	gs := world(t, 3, 200*time.Millisecond, Options{DiagnosisTimeout: 300 * time.Millisecond, StoreHost: 2},
		shared(deadStore{}))
	errs := onRanks(gs, []int{0, 1}, allReduce(4))
	for _, r := range []int{0, 1} {
		se := stallOf(t, r, errs[r])
		if se.StoreErr == nil || se.StoreHost != 2 || !slices.Equal(se.Culprits(), []int{2}) {
			t.Fatalf("rank %d: diagnosis %+v, want the store's host rank 2 named", r, se)
		}
		want := fmt.Sprintf("pg: the store did not answer (hosted by rank 2, which is likely stopped or dead) while rank "+
			"%d waited in allreduce #1; check rank 2:", r)
		if !strings.HasPrefix(errs[r].Error(), want) || !strings.Contains(errs[r].Error(), "(store: timeout: store: set") {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
}

// With CheckCollectives, a rank that issues another op, or another
// length, fails the collective on every rank with a MismatchError naming
// it, and the group stays usable.
func TestMismatchOnEveryRank(t *testing.T) {
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	gs := world(t, 3, 5*time.Second, Options{CheckCollectives: true}, shared(hs))
	ctx := context.Background()
	cases := map[string]struct {
		odd  func(g *Group) error
		want string
	}{
		"op": {func(g *Group) error { return g.Broadcast(ctx, pg.Float32s(make([]float32, 1024)), 0).Wait(ctx) },
			"rank 2 issued broadcast(float32 x1024, root 0) where rank 0 issued allreduce(float32 x1024, SUM)"},
		"length": {allReduce(8),
			"rank 2 issued allreduce(float32 x8, SUM) where rank 0 issued allreduce(float32 x1024, SUM)"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			errs := onRanks(gs, []int{0, 1, 2}, func(g *Group) error {
				if g.Rank() == 2 {
					return c.odd(g)
				}
				return allReduce(1024)(g)
			})
			for r, err := range errs {
				var me *pg.MismatchError
				if !errors.As(err, &me) || !errors.Is(err, pg.ErrMismatch) {
					t.Fatalf("rank %d: got %v, want a *pg.MismatchError", r, err)
				}
				if !slices.Equal(me.Differ, []int{2}) || me.Rank != r || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if errs := onRanks(gs, []int{0, 1, 2}, allReduce(1024)); errors.Join(errs...) != nil {
				t.Fatalf("the group is unusable after a mismatch: %v", errs)
			}
		})
	}
}

// Sequence numbers count the collectives from 1, in both modes, and
// results are those of the wrapped group.
func TestSeqAndResults(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprint("check=", check), func(t *testing.T) {
			hs := store.NewHashStore(store.HashStoreOptions{})
			defer hs.Close()
			gs := world(t, 2, 5*time.Second, Options{CheckCollectives: check}, shared(hs))
			errs := onRanks(gs, []int{0, 1}, func(g *Group) error {
				ctx := context.Background()
				var works []pg.Work
				bufs := make([][]float32, 3)
				for i := range bufs {
					bufs[i] = []float32{float32(g.Rank() + i)}
					works = append(works, g.AllReduce(ctx, pg.Float32s(bufs[i]), pg.Op(pg.Sum)))
				}
				works = append(works, g.Barrier(ctx))
				for i, w := range works {
					if err := w.Wait(ctx); err != nil {
						return err
					}
					if w.Seq() != uint64(i+1) {
						return fmt.Errorf("work %d has Seq %d", i, w.Seq())
					}
				}
				for i, b := range bufs {
					if b[0] != float32(1+2*i) {
						return fmt.Errorf("allreduce %d gave %v", i, b[0])
					}
				}
				if w := g.AllReduce(ctx, pg.Tensor{Dtype: pg.Float32, Data: make([]byte, 3)},
					pg.Op(pg.Sum)); !errors.Is(w.Wait(ctx), pg.ErrInvalidArgument) || w.Seq() != 0 {
					return fmt.Errorf("bad tensor: %v, seq %d", w.Err(), w.Seq())
				}
				return g.MonitoredBarrier(ctx, time.Second, true)
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// bare hides every optional ability of a group.
type bare struct{ pg.ProcessGroup }

func TestUnsupported(t *testing.T) {
	inner, err := local.New(1, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	g, err := Wrap(bare{inner[0]}, hs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := context.Background()
	t1 := pg.Float32s(make([]float32, 1))
	for name, w := range map[string]pg.Work{
		"reduce":   g.Reduce(ctx, t1, 0, pg.Op(pg.Sum)),
		"alltoall": g.AllToAll(ctx, t1, t1, nil, nil),
		"send":     g.Send(ctx, t1, 0, 0),
		"coalesce": g.AllReduceCoalesced(ctx, []pg.Tensor{t1}, pg.Op(pg.Sum)),
	} {
		if err := w.Wait(ctx); !errors.Is(err, pg.ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	if _, err := g.NewGroup(ctx, []int{0}); !errors.Is(err, pg.ErrUnsupported) {
		t.Errorf("NewGroup: %v", err)
	}
	if err := g.MonitoredBarrier(ctx, time.Second, false); !errors.Is(err, pg.ErrUnsupported) {
		t.Errorf("MonitoredBarrier: %v", err)
	}
	// What it has still works.
	if err := g.AllReduce(ctx, t1, pg.Op(pg.Sum)).Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// seeThrough hides every optional ability of a group but says what it
// wraps, as wrappers do (pg.Wrapper).
type seeThrough struct{ pg.ProcessGroup }

func (s seeThrough) Inner() pg.ProcessGroup { return s.ProcessGroup }

// Over a group behind another wrapper, the Group finds the abilities
// with pg.As, and reports completions through the group that has them.
func TestAbilitiesBehindAWrapper(t *testing.T) {
	inner, err := local.New(1, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	g, err := Wrap(seeThrough{inner[0]}, hs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var mu sync.Mutex
	var seen []pg.OpType
	g.OnCompletion(func(info pg.WorkInfo) {
		mu.Lock()
		seen = append(seen, info.Op)
		mu.Unlock()
	})
	ctx := context.Background()
	t1 := pg.Float32s(make([]float32, 1))
	for name, w := range map[string]pg.Work{
		"reduce":   g.Reduce(ctx, t1, 0, pg.Op(pg.Sum)),
		"alltoall": g.AllToAll(ctx, t1, t1, nil, nil),
		"coalesce": g.AllReduceCoalesced(ctx, []pg.Tensor{t1}, pg.Op(pg.Sum)),
	} {
		if err := w.Wait(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	sub, err := g.NewGroup(ctx, []int{0})
	if err != nil {
		t.Fatalf("NewGroup: %v", err)
	}
	sub.Close()
	if err := g.MonitoredBarrier(ctx, time.Second, false); err != nil {
		t.Errorf("MonitoredBarrier: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 3 {
		t.Errorf("completion hooks saw %v, want the three collectives", seen)
	}
}

func TestFingerprints(t *testing.T) {
	a := withOp(fpOf(pg.OpAllReduce, pg.Float32s(make([]float32, 5)), noRoot), pg.Op(pg.Avg))
	if b := decodeFingerprint(a.encode()); b != a {
		t.Fatalf("round trip %+v -> %+v", a, b)
	}
	if f := decodeFingerprint([]byte("garbage")); f.same(a) || f.String() != "an unreadable fingerprint" {
		t.Fatalf("garbage decoded as %v", f)
	}
	if err := compare(0, 1, []fingerprint{a, a, decodeFingerprint(nil)}); err == nil {
		t.Fatal("an unreadable fingerprint matched")
	}
	// Uneven all-to-all: rank 0 sends 1 to rank 1 and 3 to itself, rank 1 sends 2 to rank 0.
	ok := []fingerprint{fpAllToAll(0, pg.Float32, []int{3, 2}, []int{3, 1}),
		fpAllToAll(1, pg.Float32, []int{1, 0}, []int{2, 0})}
	if err := compare(0, 1, ok); err != nil {
		t.Fatal(err)
	}
	bad := []fingerprint{ok[0], fpAllToAll(1, pg.Float32, []int{1, 0}, []int{1, 1})}
	err := compare(1, 7, bad)
	var me *pg.MismatchError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "do not pair up") || me.Seq != 7 {
		t.Fatalf("unpaired splits: %v", err)
	}
	// Ties go to the set holding rank 0, the same on every rank.
	x := withOp(a, pg.Op(pg.Max))
	for me := range 2 {
		var m *pg.MismatchError
		if !errors.As(compare(me, 1, []fingerprint{a, x}), &m) || !slices.Equal(m.Differ, []int{1}) {
			t.Fatalf("rank %d: %v", me, m)
		}
	}
}

// A Wait whose ctx ends during the diagnosis returns the collective's own
// error then; the diagnosis goes on, and Err reports it.
func TestWaitCtxEndsDuringDiagnosis(t *testing.T) {
	hs := store.NewHashStore(store.HashStoreOptions{})
	defer hs.Close()
	elsewhere := store.NewHashStore(store.HashStoreOptions{})
	defer elsewhere.Close()
	gs := world(t, 2, 200*time.Millisecond, Options{DiagnosisTimeout: time.Second}, func(r int) store.Store {
		if r == 1 {
			return elsewhere // rank 1 never answers
		}
		return hs
	})
	w := gs[0].AllReduce(context.Background(), pg.Float32s(make([]float32, 4)), pg.Op(pg.Sum))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := w.Wait(ctx)
	var se *pg.StallError
	if took := time.Since(start); errors.As(err, &se) || !errors.Is(err, pg.ErrTimeout) || took > 900*time.Millisecond {
		t.Fatalf("Wait returned %v after %v; want the collective's own timeout at the ctx's end", err, took)
	}
	if err := w.Err(); !errors.As(err, &se) || !slices.Equal(se.Silent, []int{1}) {
		t.Fatalf("Err after the diagnosis: %v", err)
	}
}
