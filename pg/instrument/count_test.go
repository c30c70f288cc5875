package instrument_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/local"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// counted is a local world of n ranks, each behind a Counter.
func counted(t *testing.T, n int) []*instrument.Counter {
	t.Helper()
	groups, err := local.New(n, local.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*instrument.Counter, n)
	for r, g := range groups {
		out[r] = instrument.Count(g)
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// onEach runs fn on every rank at once and fails t with the first error.
func onEach(t *testing.T, cs []*instrument.Counter, fn func(ctx context.Context, r int, c *instrument.Counter) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() { errs[r] = fn(ctx, r, c) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// Every call through a Counter is counted, with its input's bytes: the
// five collectives on the Counter, the abilities pg.As finds on it, and
// the collectives of the subgroups it makes.
func TestCounterCountsThroughEveryAbility(t *testing.T) {
	cs := counted(t, 2)
	onEach(t, cs, func(ctx context.Context, r int, c *instrument.Counter) error {
		var (
			p2p pg.PointToPoint
			rt  pg.Rooted
			co  pg.Coalescer
			a2a pg.AllToAller
			sp  pg.Splitter
		)
		if !pg.As(c, &p2p) || !pg.As(c, &rt) || !pg.As(c, &co) || !pg.As(c, &a2a) || !pg.As(c, &sp) {
			return fmt.Errorf("an ability of the local group is not found through the Counter")
		}
		f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
		ws := []pg.Work{
			c.AllReduce(ctx, f32(16), pg.Op(pg.Sum)),            // 64
			c.Broadcast(ctx, pg.NewTensor(pg.Float64, 4), 0),    // 32
			c.AllGather(ctx, f32(4), f32(2)),                    // 8
			c.ReduceScatter(ctx, f32(1), f32(2), pg.Op(pg.Sum)), // 8
			c.Barrier(ctx),                                                         // 0
			rt.Reduce(ctx, f32(3), 0, pg.Op(pg.Sum)),                               // 12
			a2a.AllToAll(ctx, f32(4), f32(4), nil, nil),                            // 16
			co.AllReduceCoalesced(ctx, []pg.Tensor{f32(1), f32(2)}, pg.Op(pg.Sum)), // 12
		}
		if r == 0 {
			ws = append(ws, p2p.Send(ctx, f32(5), 1, 7)) // 20
		} else {
			ws = append(ws, p2p.Recv(ctx, f32(5), 0, 7)) // 0
		}
		if err := pg.WaitAll(ctx, ws...); err != nil {
			return err
		}
		sub, err := sp.Split(ctx, 0, r)
		if err != nil {
			return err
		}
		defer sub.Close()
		if _, ok := sub.(*instrument.Counter); !ok {
			return fmt.Errorf("the subgroup is a %T, not a Counter", sub)
		}
		return sub.AllReduce(ctx, f32(25), pg.Op(pg.Sum)).Wait(ctx) // 100
	})
	want := []int64{64 + 32 + 8 + 8 + 12 + 16 + 12 + 20 + 100, 64 + 32 + 8 + 8 + 12 + 16 + 12 + 100}
	for r, c := range cs {
		if c.Bytes() != want[r] || c.Calls() != 10 {
			t.Errorf("rank %d: %d bytes in %d calls, want %d in 10", r, c.Bytes(), c.Calls(), want[r])
		}
	}
}

// hidden wraps a group without Inner, hiding all but ProcessGroup.
type hidden struct{ pg.ProcessGroup }

// A Counter claims no ability its group lacks, and a subgroup it does
// not join is nil, not a Counter of nil.
func TestCounterClaimsNothingItsGroupLacks(t *testing.T) {
	cs := counted(t, 2)
	bare := instrument.Count(hidden{cs[0]})
	var p2p pg.PointToPoint
	var ext pg.Extended
	if pg.As(bare, &p2p) || pg.As(bare, &ext) {
		t.Error("a Counter of a group without PointToPoint offers it")
	}
	if _, ok := any(cs[0]).(pg.PointToPoint); ok {
		t.Error("the Counter itself claims PointToPoint")
	}
	onEach(t, cs, func(ctx context.Context, r int, c *instrument.Counter) error {
		var ext pg.Extended
		if !pg.As(c, &ext) {
			return fmt.Errorf("no pg.Extended through the Counter")
		}
		color := 0
		if r == 1 {
			color = pg.NoColor
		}
		sub, err := ext.Split(ctx, color, r)
		if err != nil {
			return err
		}
		if r == 1 && sub != nil {
			return fmt.Errorf("a non-member got %T, want nil", sub)
		}
		if sub != nil {
			defer sub.Close()
		}
		return ext.Barrier(ctx).Wait(ctx)
	})
}

// seeThrough hides every ability of a group but says what it wraps.
type seeThrough struct{ pg.ProcessGroup }

func (s seeThrough) Inner() pg.ProcessGroup { return s.ProcessGroup }

// Wrap finds completion hooks behind a wrapper with pg.As: it measures
// by hook and returns the group it was given, not a watcher.
func TestWrapFindsHooksBehindAWrapper(t *testing.T) {
	groups, err := local.New(1, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := seeThrough{groups[0]}
	reg := prometheus.NewRegistry()
	g, err := instrument.Wrap(in, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g != pg.ProcessGroup(in) {
		t.Fatalf("Wrap returned a %T, want the group itself", g)
	}
	ctx := context.Background()
	if err := g.AllReduce(ctx, pg.Float32s([]float32{1}), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	g.Close() // delivers the hook
	if n, err := testutil.GatherAndCount(reg, "ddp_collective_queue_seconds"); err != nil || n != 1 {
		t.Errorf("ddp_collective_queue_seconds (measured only by hook): %d series, %v", n, err)
	}
}
