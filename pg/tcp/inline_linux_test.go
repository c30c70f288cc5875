package tcp

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// onExecutor reports whether the calling goroutine is the group's
// executor.
func onExecutor() bool {
	buf := make([]byte, 8<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*Group).execute(")
}

// TestCallerRuns checks Note [the caller runs] on a group whose ranks all
// share memory: a collective waited for with its own ctx runs on the
// waiting goroutine, with those queued before it and in issue order; one
// nobody waits for, or waited for with a ctx of its own, runs on the
// executor all the same; and a group over TCP only always uses the
// executor.
func TestCallerRuns(t *testing.T) {
	ctx := context.Background()
	type ran struct{ order, onExec []int }
	// issue queues k collectives on every rank that record, per rank,
	// the order they ran in and whether the executor ran them, and
	// reduce a tensor so that the ranks really meet.
	issue := func(gs []*Group, k int, rec []ran) [][]pg.Work {
		ws := make([][]pg.Work, len(gs))
		for r, g := range gs {
			for i := range k {
				t := pg.Float32s([]float32{float32(r + 1)})
				ws[r] = append(ws[r], g.submit(ctx, pg.OpAllReduce, inPlace(t), func(run *run) error {
					rec[r].order = append(rec[r].order, i)
					if onExecutor() {
						rec[r].onExec = append(rec[r].onExec, i)
					}
					return g.allReduce(run, t, pg.Op(pg.Sum))
				}))
			}
		}
		return ws
	}

	t.Run("waited", func(t *testing.T) {
		gs := newGroups(t, 2, time.Minute, nil)
		if gs[0].shm == nil || !gs[0].shm.Full() {
			t.Skip("no shared memory here")
		}
		for trial := range 20 { // the executor may win now and then; the caller must win mostly
			rec := make([]ran, 2)
			ws := issue(gs, 3, rec)
			errs := each(gs, func(r int, _ *Group) error { return ws[r][2].Wait(ctx) }) // the last only
			for r, err := range errs {
				if err != nil {
					t.Fatalf("trial %d rank %d: %v", trial, r, err)
				}
				if got := rec[r].order; len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 2 {
					t.Fatalf("trial %d rank %d ran %v, want [0 1 2]", trial, r, got)
				}
			}
			if len(rec[0].onExec) == 0 && len(rec[1].onExec) == 0 {
				return
			}
		}
		t.Fatal("in 20 trials the executor ran every waited collective; the caller never did")
	})

	t.Run("not waited", func(t *testing.T) {
		gs := newGroups(t, 2, time.Minute, nil)
		rec := make([]ran, 2)
		ws := issue(gs, 1, rec)
		for r := range gs {
			select {
			case <-ws[r][0].Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("rank %d: a collective nobody waits for never ran", r)
			}
			if err := ws[r][0].Err(); err != nil || len(rec[r].onExec) != 1 {
				t.Fatalf("rank %d: err %v, executor ran %v, want nil and [0]", r, err, rec[r].onExec)
			}
		}
	})

	t.Run("own ctx", func(t *testing.T) {
		gs := newGroups(t, 2, time.Minute, nil)
		rec := make([]ran, 2)
		ws := issue(gs, 1, rec)
		errs := each(gs, func(r int, _ *Group) error {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return ws[r][0].Wait(wctx)
		})
		for r, err := range errs {
			if err != nil || len(rec[r].onExec) != 1 {
				t.Fatalf("rank %d: err %v, executor ran %v, want nil and [0]", r, err, rec[r].onExec)
			}
		}
	})

	t.Run("tcp only", func(t *testing.T) {
		gs := newGroups(t, 2, time.Minute, func(o *Options) { o.NoSharedMemory = true })
		var n atomic.Int32
		for range 5 {
			rec := make([]ran, 2)
			ws := issue(gs, 1, rec)
			for r, err := range each(gs, func(r int, _ *Group) error { return ws[r][0].Wait(ctx) }) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				n.Add(int32(len(rec[r].onExec)))
			}
		}
		if n.Load() != 10 {
			t.Fatalf("the executor ran %d of 10 collectives over TCP, want all", n.Load())
		}
	})
}
