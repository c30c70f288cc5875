package tcp

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
	"github.com/goddp/ddp/pg/store"
)

// TestRefusesPeerWithoutSecret: while rank 1 waits for rank 0, a client
// without the secret and one that speaks garbage connect to it. Both are
// refused and logged at Warn with their addresses; then the real rank 0
// joins and the group works.
func TestRefusesPeerWithoutSecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	core, logs := observer.New(zapcore.WarnLevel)

	type result struct {
		g   *Group
		err error
	}
	rank1 := make(chan result, 1)
	go func() {
		g, err := New(ctx, st, Options{Rank: 1, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0", Logger: zap.New(core)})
		rank1 <- result{g, err}
	}()
	addr, err := st.Get(ctx, addrKey(1))
	if err != nil {
		t.Fatal(err)
	}

	intruder, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	err = wire.ClientHandshake(intruder, []byte("not-the-secret-of-this-job!"), hello{rank: 0, size: 2}.encode())
	if !errors.Is(err, pg.ErrUnauthenticated) {
		t.Errorf("intruder's handshake: got %v, want pg.ErrUnauthenticated", err)
	}
	babbler, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	babbler.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	babbler.Close()

	g0, err := New(ctx, st, Options{Rank: 0, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	defer g0.Close()
	r1 := <-rank1
	if r1.err != nil {
		t.Fatalf("rank 1: %v", r1.err)
	}
	defer r1.g.Close()
	checkAllReduce(t, []*Group{g0, r1.g}, 100)

	refused := map[string]bool{}
	for _, e := range logs.FilterMessage("refused connection").All() {
		refused[e.ContextMap()["remote"].(string)] = true
	}
	for _, c := range []net.Conn{intruder, babbler} {
		if !refused[c.LocalAddr().String()] {
			t.Errorf("no Warn \"refused connection\" with remote %v; logged: %v", c.LocalAddr(), logs.All())
		}
	}
}

// TestDialerWithoutSecretFails: a rank holding the wrong secret cannot
// join: its New fails with pg.ErrUnauthenticated, and the rank it dialed
// gives up with a timeout naming it.
func TestDialerWithoutSecretFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	errs := make(chan error, 1)
	go func() {
		g, err := New(ctx, st, Options{Rank: 1, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0"})
		if g != nil {
			g.Close()
		}
		errs <- err
	}()
	_, err := New(ctx, st, Options{Rank: 0, Size: 2, Secret: []byte("a-different-secret-entirely"), ListenAddr: "127.0.0.1:0"})
	var ce *pg.CollectiveError
	if !errors.Is(err, pg.ErrUnauthenticated) || !errors.As(err, &ce) || ce.Peer != 1 {
		t.Errorf("rank 0 with the wrong secret: got %v, want pg.ErrUnauthenticated naming rank 1", err)
	}
	err = <-errs
	if !errors.Is(err, pg.ErrTimeout) || !errors.As(err, &ce) || ce.Peer != 0 {
		t.Errorf("rank 1: got %v, want pg.ErrTimeout naming rank 0", err)
	}
}

// TestMismatchedOptionsRefused: ranks that disagree on a knob that
// decides the algorithm cannot form a group; the dialer says why.
func TestMismatchedOptionsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	errs := make(chan error, 1)
	go func() {
		g, err := New(ctx, st, Options{Rank: 1, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0", ChunkBytes: 1 << 20})
		if g != nil {
			g.Close()
		}
		errs <- err
	}()
	_, err := New(ctx, st, Options{Rank: 0, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0", ChunkBytes: 2 << 20})
	var ce *pg.CollectiveError
	if !errors.Is(err, pg.ErrMismatch) || !errors.As(err, &ce) || ce.Peer != 1 || !strings.Contains(err.Error(), "ChunkBytes") {
		t.Errorf("rank 0: got %v, want pg.ErrMismatch naming rank 1 and ChunkBytes", err)
	}
	if err := <-errs; err == nil {
		t.Errorf("rank 1 formed a group with a rank configured differently")
	}
}

// TestOptionsValidated: a missing secret, listen address or bad rank is
// refused before anything listens.
func TestOptionsValidated(t *testing.T) {
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	for _, o := range []Options{
		{Rank: 0, Size: 2, ListenAddr: "127.0.0.1:0"},
		{Rank: 0, Size: 2, Secret: []byte("short"), ListenAddr: "127.0.0.1:0"},
		{Rank: 0, Size: 2, Secret: testSecret},
		{Rank: 2, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0"},
		{Rank: 0, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0", ChunkBytes: 2 << 20, MaxFrame: 1 << 20},
		{Rank: 0, Size: 2, Secret: testSecret, ListenAddr: "0.0.0.0:0"},
	} {
		if _, err := New(context.Background(), st, o); !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("New(%+v): got %v, want pg.ErrInvalidArgument", o, err)
		}
	}
}

// TestWorldSizeBounded: a size above 65536 (a corrupt
// WORLD_SIZE, say) is refused at once, before anything is allocated per
// peer or anyone is waited for.
func TestWorldSizeBounded(t *testing.T) {
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, size := range []int{65536 + 1, 2_000_000_000} {
		o := Options{Rank: 0, Size: size, Secret: testSecret, ListenAddr: "127.0.0.1:0", Timeout: time.Second}
		if _, err := New(ctx, st, o); !errors.Is(err, pg.ErrInvalidArgument) || !strings.Contains(err.Error(), "MaxWorldSize") {
			t.Errorf("New with Size %d: got %v, want pg.ErrInvalidArgument naming MaxWorldSize", size, err)
		}
	}
}
