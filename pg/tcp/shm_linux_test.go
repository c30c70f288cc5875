//go:build linux

package tcp

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// TestShmHandshakeGuardsSegment: a client that does not hold the secret
// gets no descriptor from a rank's segment socket, while one that does
// gets a segment it can map; and once a group is up, no descriptor of a
// segment is left in the process for anyone to open through /proc.
func TestShmHandshakeGuardsSegment(t *testing.T) {
	o, _ := Options{Rank: 0, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0"}.withDefaults()
	segs := make([][]byte, 2)
	name, ln, fd, err := shmListen(o, segs)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(segs[0])
	done := make(chan struct{})
	go func() { defer close(done); shmServe(ln, fd, o) }()
	defer func() { ln.Close(); <-done; unix.Close(fd) }()

	c, err := net.Dial("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	wrong := []byte("not-the-job-secret-at-all")
	if err := wire.ClientHandshake(c, wrong, helloOf(Options{Rank: 1, Size: 2}).encode()); err == nil {
		t.Error("the handshake with the wrong secret succeeded")
	}
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, _ := c.(*net.UnixConn).ReadMsgUnix(make([]byte, 1), oob)
	if oobn != 0 {
		t.Fatal("a client without the secret received a descriptor")
	}
	c.Close()

	peer := o
	peer.Rank = 1
	m, err := shmDial(context.Background(), name, peer)
	if err != nil {
		t.Fatalf("a client with the secret got no segment: %v", err)
	}
	defer unix.Munmap(m)
	segs[0][shmHeader] = 42
	if m[shmHeader] != 42 {
		t.Fatal("the mapped segment is not the rank's")
	}

	gs := newGroups(t, 2, time.Minute, nil)
	if gs[0].shm == nil {
		t.Fatal("shared memory not in use")
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if l, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); strings.Contains(l, "goddp-pg-tcp") && e.Name() != itoa(fd) {
			t.Errorf("segment descriptor %s (%s) left open after New", e.Name(), l)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

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
	seg := gs[0].shm.segs[1]
	r := rand.New(rand.NewPCG(1, 2))
	for i := range seg {
		seg[i] = byte(r.Uint32())
	}
	for _, off := range []int{offArrive, offReduced, offDone} {
		*gs[0].shm.word(1, off) = 1 << 30
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
		if i < 2 && (g.shm == nil || !slices.Equal(g.shm.members, []int{0, 1})) {
			t.Errorf("rank %d: shared-memory world %v, want ranks 0 and 1", i, g.shm)
		}
		if g.hosts == nil || !slices.Equal(g.hosts.leaders, []int{0, 2}) {
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
