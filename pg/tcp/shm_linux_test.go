//go:build linux

package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// TestShmNoDescriptorLeft: once a group is up, no descriptor of a
// segment is left in the process for anyone to open through /proc (the
// handshake that guards a segment is tested in internal/shm).
func TestShmNoDescriptorLeft(t *testing.T) {
	gs := newGroups(t, 2, time.Minute, nil)
	if gs[0].shm == nil {
		t.Fatal("shared memory not in use")
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); strings.Contains(l, "goddp-pg-tcp") {
			t.Errorf("segment descriptor %s (%s) left open after New", e.Name(), l)
		}
	}
}

// TestShmGarbage: a peer that writes garbage into its segment makes the
// collective fail with pg.ErrMismatch naming it; nothing reads out of
// range.
func TestShmGarbage(t *testing.T) {
	gs := newGroups(t, 2, 5*time.Second, nil)
	if gs[0].shm == nil {
		t.Fatal("shared memory not in use")
	}
	// Rank 1 is "buggy": its segment is filled with random bytes, and its
	// counters claim every chunk is ready, while it issues nothing.
	seg := gs[0].shm.Segment(1)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range seg {
		seg[i] = byte(r.Uint32())
	}
	for _, off := range []int{shm.OffArrive, shm.OffReduced, shm.OffDone} {
		binary.NativeEndian.PutUint32(gs[0].shm.Segment(1)[off:], 1<<30)
	}
	ctx := context.Background()
	buf := pg.NewTensor(pg.Float32, 3<<20)
	err := gs[0].AllReduce(ctx, buf, pg.Op(pg.Sum)).Wait(ctx)
	var ce *pg.CollectiveError
	if !errors.As(err, &ce) || !errors.Is(err, pg.ErrMismatch) || ce.Peer != 1 {
		t.Fatalf("got %v, want a mismatch naming rank 1", err)
	}
}

// TestShmFallback: when one rank switches shared memory off, it uses
// TCP with every rank, the others still share memory between them (a
// world that is not the whole group), every rank agrees on that layout,
// and collectives still work.
func TestShmFallback(t *testing.T) {
	gs := newGroups(t, 3, time.Minute, func(o *Options) { o.NoSharedMemory = o.Rank == 2 })
	for i, g := range gs {
		if i == 2 && g.shm != nil {
			t.Errorf("rank 2 uses shared memory though it switched it off")
		}
		if i < 2 && (g.shm == nil || !slices.Equal(g.shm.Members(), []int{0, 1})) {
			t.Errorf("rank %d: shared-memory world %v, want ranks 0 and 1", i, g.shm)
		}
		if g.hosts == nil || !slices.Equal(g.hosts.Leaders, []int{0, 2}) {
			t.Errorf("rank %d: layout %+v, want leaders 0 and 2", i, g.hosts)
		}
	}
	bufs := make([]pg.Tensor, 3)
	errs := each(gs, func(i int, g *Group) error {
		bufs[i] = pg.Float32s([]float32{float32(i), 1})
		return g.AllReduce(context.Background(), bufs[i], pg.Op(pg.Sum)).Wait(context.Background())
	})
	for i, err := range errs {
		if err != nil || !slices.Equal(pg.View[float32](bufs[i]), []float32{3, 3}) {
			t.Errorf("rank %d: %v %v", i, err, pg.View[float32](bufs[i]))
		}
	}
}
