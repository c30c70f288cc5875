//go:build linux

package tcp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// TestHostBuffers: buffers from NewHostBuffer (the groups' arenas,
// mapped across the ranks by Setup) are reduced in place, with the bits
// of the same AllReduce on the heap, for 2 and 3 ranks and sizes from one
// chunk to several; a slice of a buffer is in place too; a group without
// shared memory has no host buffers and says why; an arena too small
// refuses with shm.ErrArenaFull; a double Close is an error.
func TestHostBuffers(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			gs := newGroups(t, n, time.Minute, nil)
			for _, count := range []int{shm.SmallAllReduceBytes/8 + 3, shm.SlotBytes/8 - 1, (2*shm.SlotBytes)/8 + 11} {
				heap := make([]pg.Tensor, n)
				bufs := make([]backend.HostBuffer, n)
				for r, g := range gs {
					heap[r] = pg.NewTensor(pg.Float64, count)
					b, err := g.NewHostBuffer(pg.Float64, count)
					if err != nil {
						t.Fatal(err)
					}
					bufs[r] = b
					for _, x := range []pg.Tensor{heap[r], b.Tensor()} {
						v := pg.View[float64](x)
						for k := range v {
							v[k] = math.Cos(float64(r*31+k)) * 1e4
						}
					}
				}
				before := gs[0].shm.InPlaceRuns()
				errs := each(gs, func(r int, g *Group) error {
					if err := g.AllReduce(ctx, heap[r], pg.Op(pg.Avg)).Wait(ctx); err != nil {
						return err
					}
					return g.AllReduce(ctx, bufs[r].Tensor(), pg.Op(pg.Avg)).Wait(ctx)
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				if got := gs[0].shm.InPlaceRuns() - before; got != 1 {
					t.Errorf("%d elements: %d AllReduces in place, want 1 (the host buffers')", count, got)
				}
				want := pg.View[float64](heap[0])
				for r := range n {
					got := pg.View[float64](bufs[r].Tensor())
					for k := range got {
						if math.Float64bits(got[k]) != math.Float64bits(want[k]) {
							t.Fatalf("%d elements: rank %d [%d] = %v in place, %v on the heap", count, r, k, got[k], want[k])
						}
					}
				}
				// A slice of a buffer lies in the arena too.
				before = gs[0].shm.InPlaceRuns()
				errs = each(gs, func(r int, g *Group) error {
					return g.AllReduce(ctx, bufs[r].Tensor().Slice(1, count), pg.Op(pg.Sum)).Wait(ctx)
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("slice: rank %d: %v", r, err)
					}
				}
				if got := gs[0].shm.InPlaceRuns() - before; count-1 > shm.SmallAllReduceBytes/8 && got != 1 {
					t.Errorf("a slice of %d elements: %d AllReduces in place, want 1", count-1, got)
				}
				for _, b := range bufs {
					if err := b.Close(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := gs[0].NewHostBuffer(pg.Float32, 0); err == nil {
				t.Error("a host buffer of 0 elements")
			}
			if _, err := gs[0].NewHostBuffer(pg.Float64, math.MaxInt/4); !errors.Is(err, pg.ErrInvalidArgument) {
				t.Errorf("a host buffer of more bytes than an int holds: %v, want pg.ErrInvalidArgument", err)
			}
			b, err := gs[0].NewHostBuffer(pg.Float32, 10)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); !errors.Is(err, pg.ErrInvalidArgument) {
				t.Fatalf("a second Close: %v, want pg.ErrInvalidArgument", err)
			}
		})
	}
	t.Run("no shared memory", func(t *testing.T) {
		gs := newGroups(t, 2, time.Minute, func(o *Options) { o.NoSharedMemory = true })
		if _, err := gs[0].NewHostBuffer(pg.Float32, 10); !errors.Is(err, pg.ErrUnsupported) {
			t.Fatalf("%v, want pg.ErrUnsupported", err)
		}
	})
	t.Run("arena full", func(t *testing.T) {
		gs := newGroups(t, 2, time.Minute, func(o *Options) { o.SharedArenaBytes = 1 << 20 })
		if _, err := gs[0].NewHostBuffer(pg.Float32, 1<<20); !errors.Is(err, shm.ErrArenaFull) {
			t.Fatalf("4 MiB from a 1 MiB arena: %v, want shm.ErrArenaFull", err)
		}
		if _, err := gs[0].NewHostBuffer(pg.Float32, 1<<10); err != nil {
			t.Fatalf("4 KiB from a 1 MiB arena: %v", err)
		}
	})
}

// TestHostBufferOutlivesGroup: a buffer still open when its group closes
// keeps its contents and stays writable (the arena stays mapped), and
// closes after; a view of a buffer freed before the Close (a gradient of
// a closed reducer) reads zeros, its memory given back, instead of
// crashing the process.
func TestHostBufferOutlivesGroup(t *testing.T) {
	gs := newGroups(t, 2, time.Minute, nil)
	live, err := gs[0].NewHostBuffer(pg.Int64, 512)
	if err != nil {
		t.Fatal(err)
	}
	freed, err := gs[0].NewHostBuffer(pg.Int64, 1024)
	if err != nil {
		t.Fatal(err)
	}
	pg.View[int64](live.Tensor())[3] = 5
	stale := pg.View[int64](freed.Tensor())
	stale[7] = 9
	if err := freed.Close(); err != nil {
		t.Fatal(err)
	}
	closeGroups(gs)
	v := pg.View[int64](live.Tensor())
	v[511] = 7
	if v[511] != 7 || v[3] != 5 {
		t.Fatalf("the live buffer after Close: [3] = %d, [511] = %d; want 5 and 7", v[3], v[511])
	}
	if stale[7] != 0 {
		t.Fatalf("a freed buffer after Close reads %d, want 0 (its memory given back)", stale[7])
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
}
