package pg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// plain wraps a group and declares only what it overrides, as most
// wrappers do: without Inner it would hide every optional ability.
type plain struct{ pg.ProcessGroup }

func (p plain) Inner() pg.ProcessGroup { return p.ProcessGroup }

// opaque is a wrapper without Inner.
type opaque struct{ pg.ProcessGroup }

// viewing hands out its own view of PointToPoint from an As method.
type viewing struct {
	pg.ProcessGroup
	sends *int
}

func (v viewing) Inner() pg.ProcessGroup { return v.ProcessGroup }

func (v viewing) As(target any) bool {
	t, ok := target.(*pg.PointToPoint)
	var p pg.PointToPoint
	if !ok || !pg.As(v.ProcessGroup, &p) {
		return false
	}
	*t = countSends{p, v.sends}
	return true
}

type countSends struct {
	pg.PointToPoint
	n *int
}

func (c countSends) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	*c.n++
	return c.PointToPoint.Send(ctx, t, dst, tag)
}

// loop is a wrapper that wraps itself.
type loop struct{ pg.ProcessGroup }

func (l *loop) Inner() pg.ProcessGroup { return l }

func newLocal(t *testing.T, n int) []*local.Group {
	t.Helper()
	gs, err := local.New(n, local.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

func TestAsFindsAbilitiesBehindWrappers(t *testing.T) {
	g := newLocal(t, 1)[0]
	w := plain{plain{g}}
	if _, ok := any(w).(pg.Splitter); ok {
		t.Fatal("the wrapper itself is a Splitter: the test proves nothing")
	}
	var sp pg.Splitter
	if !pg.As(w, &sp) || sp != pg.Splitter(g) {
		t.Errorf("As(Splitter) through two wrappers: %v, %T", sp != nil, sp)
	}
	var p2p pg.PointToPoint
	if pg.As(opaque{g}, &p2p) {
		t.Error("As found PointToPoint behind a wrapper without Inner")
	}
	var pgv pg.ProcessGroup
	if !pg.As(opaque{g}, &pgv) || pgv != pg.ProcessGroup(opaque{g}) {
		t.Error("As(ProcessGroup) did not stop at the outer group")
	}
	var lg *local.Group
	if !pg.As(w, &lg) || lg != g {
		t.Error("As(*local.Group) did not find the backend")
	}
	var ext pg.Extended
	if !pg.As(plain{opaque{g}}, &pgv) || pg.As(plain{opaque{g}}, &ext) {
		t.Error("As looked behind a wrapper without Inner")
	}
	if got := pg.BackendName(plain{g}); got != "local" {
		t.Errorf("BackendName through a wrapper = %q, want local", got)
	}
	if pg.As(&loop{g}, &p2p) {
		t.Error("As found PointToPoint in a loop of wrappers")
	}
}

func TestAsConsultsTheWrappersAsMethod(t *testing.T) {
	gs := newLocal(t, 2)
	sends := make([]int, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range gs {
		w := plain{viewing{gs[r], &sends[r]}}
		wg.Go(func() {
			var p2p pg.PointToPoint
			if !pg.As(w, &p2p) {
				t.Error("no PointToPoint")
				return
			}
			buf := []float32{float32(r)}
			if r == 0 {
				errs[r] = p2p.Send(ctx, pg.Float32s(buf), 1, 0).Wait(ctx)
			} else {
				errs[r] = p2p.Recv(ctx, pg.Float32s(buf), 0, 0).Wait(ctx)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if sends[0] != 1 {
		t.Errorf("the send bypassed the wrapper's view: %d sends seen", sends[0])
	}
	var sp pg.Splitter
	if !pg.As(viewing{gs[0], &sends[0]}, &sp) || sp != pg.Splitter(gs[0]) {
		t.Error("an As method that declines did not let As look inside")
	}
}

func TestCoalescingBehindAWrapper(t *testing.T) {
	g := newLocal(t, 1)[0]
	ctx := context.Background()
	c := pg.StartCoalescing(plain{g})
	c.AllReduce(pg.Float32s([]float32{1}), pg.Op(pg.Sum))
	if err := c.End(ctx).Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAsPanicsOnABadTarget(t *testing.T) {
	g := newLocal(t, 1)[0]
	for name, target := range map[string]any{"nil": nil, "not a pointer": 3, "nil pointer": (*pg.PointToPoint)(nil)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			pg.As(g, target)
		}()
	}
}

// A hook that needs Send and Recv finds them on a group behind a wrapper.
func ExampleAs() {
	gs, err := local.New(1, local.Options{Timeout: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gs[0].Close()
	var g pg.ProcessGroup = plain{gs[0]} // a wrapper that declares nothing but Inner
	_, direct := g.(pg.PointToPoint)
	var p2p pg.PointToPoint
	fmt.Println(direct, pg.As(g, &p2p), pg.BackendName(g))
	// Output: false true local
}
