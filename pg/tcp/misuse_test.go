package tcp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// A nil ctx is the caller's bug, and fails that call alone:
// were submit to panic on it while holding the group's lock, or Send
// while holding its link's, the next collective and Close would hang for
// ever. Every call here is bounded: a panic or a hang fails the test.
func TestNilContextFailsTheCallAlone(t *testing.T) {
	gs := newGroups(t, 2, 10*time.Second, nil)
	const bound = 20 * time.Second
	var none context.Context // as a caller's bug would pass it
	for _, c := range []struct {
		what string
		call func(r int, g *Group) pg.Work
	}{
		{"AllReduce(nil ctx)",
			func(_ int, g *Group) pg.Work { return g.AllReduce(none, pg.Float32s([]float32{1}), pg.Op(pg.Sum)) }},
		{"Barrier(nil ctx)", func(_ int, g *Group) pg.Work { return g.Barrier(none) }},
		{"Send or Recv(nil ctx)", func(r int, g *Group) pg.Work {
			if r == 0 {
				return g.Send(none, pg.Float32s([]float32{1}), 1, 0)
			}
			return g.Recv(none, pg.Float32s([]float32{0}), 0, 0)
		}},
	} {
		for r, err := range boundedEach(t, bound, c.what, gs, c.call) {
			if !errors.Is(err, pg.ErrInvalidArgument) {
				t.Errorf("%s: rank %d: got %v, want an error wrapping pg.ErrInvalidArgument", c.what, r, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	bufs := [][]float32{{1, 2}, {10, 20}}
	for r, err := range boundedEach(t, bound, "AllReduce after them", gs, func(r int, g *Group) pg.Work {
		return g.AllReduce(ctx, pg.Float32s(bufs[r]), pg.Op(pg.Sum))
	}) {
		if err != nil || bufs[r][0] != 11 || bufs[r][1] != 22 {
			t.Errorf("AllReduce after them: rank %d: got %v, error %v; want [11 22]", r, bufs[r], err)
		}
	}
	got := []float32{0}
	for r, err := range boundedEach(t, bound, "Send and Recv after them", gs, func(r int, g *Group) pg.Work {
		if r == 0 {
			return g.Send(ctx, pg.Float32s([]float32{7}), 1, 0)
		}
		return g.Recv(ctx, pg.Float32s(got), 0, 0)
	}) {
		if err != nil {
			t.Errorf("Send and Recv after them: rank %d: %v", r, err)
		}
	}
	if got[0] != 7 {
		t.Errorf("Recv after them: got %v, want [7]", got)
	}
	boundedEach(t, bound, "Close", gs, func(_ int, g *Group) pg.Work { return pg.Completed(g.Close()) })
}

// boundedEach makes call on every rank at once and returns the errors of
// their Works by rank. A call that panics fails t; one that has not
// returned, with its Work finished, within bound fails t and ends it.
func boundedEach(t *testing.T, bound time.Duration, what string, gs []*Group,
	call func(r int, g *Group) pg.Work) []error {
	t.Helper()
	type result struct {
		r        int
		err      error
		panicked bool
	}
	results := make(chan result, len(gs))
	for r, g := range gs {
		go func() {
			res := result{r: r}
			defer func() {
				if p := recover(); p != nil {
					res.err, res.panicked = fmt.Errorf("panicked: %v", p), true
				}
				results <- res
			}()
			w := call(r, g)
			<-w.Done()
			res.err = w.Err()
		}()
	}
	errs := make([]error, len(gs))
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for range gs {
		select {
		case res := <-results:
			if res.panicked {
				t.Errorf("%s: rank %d: %v", what, res.r, res.err)
			}
			errs[res.r] = res.err
		case <-timer.C:
			t.Fatalf("%s: not every rank's call returned, with its Work finished, within %v: hung", what, bound)
		}
	}
	return errs
}
