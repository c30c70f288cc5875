package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
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
		g, err := New(ctx, st,
			Options{Rank: 1, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0", Logger: zap.New(core)})
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
	r1.g.Close() // its acceptor has noted every refusal

	lines, total := refusals(logs)
	if lines != 2 || total != 2 {
		t.Errorf("%d refusal lines counting %d connections, want 2 and 2 (the first, and the summary of the rest); logged: "+
			"%v", lines, total, logs.All())
	}
	first := logs.FilterMessageSnippet("refused connection: ").All()
	if len(first) != 1 ||
		(first[0].ContextMap()["remote"] != intruder.LocalAddr().String() &&
			first[0].ContextMap()["remote"] != babbler.LocalAddr().String()) {
		t.Errorf("the first refusal is not logged with its remote address (%v or %v): %v", intruder.LocalAddr(),
			babbler.LocalAddr(), first)
	}
}

var moreRE = regexp.MustCompile(`^refused (\d+) more connections$`)

// refusals counts the refusal lines logged and the connections they
// account for (Note [rate-limited refusals]).
func refusals(logs *observer.ObservedLogs) (lines, total int) {
	for _, e := range logs.All() {
		switch m := moreRE.FindStringSubmatch(e.Message); {
		case strings.HasPrefix(e.Message, "refused connection: "):
			lines, total = lines+1, total+1
		case m != nil:
			n, _ := strconv.Atoi(m[1])
			lines, total = lines+1, total+n
		}
	}
	return lines, total
}

// TestRankPortFloodRateLimited: 3000 connections that speak garbage to a
// rank's port while it waits for its peer give two lines, the first
// refusal and a count of the rest, not 3000 (Note [rate-limited
// refusals]); then the peer joins and the group works.
func TestRankPortFloodRateLimited(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	rank1 := make(chan *Group, 1)
	go func() {
		g, err := New(ctx, st,
			Options{Rank: 1, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0", Logger: zap.New(core)})
		if err != nil {
			t.Errorf("rank 1: %v", err)
		}
		rank1 <- g
	}()
	addr, err := st.Get(ctx, addrKey(1))
	if err != nil {
		t.Fatal(err)
	}
	const flood = 3000
	var wg sync.WaitGroup
	next := make(chan struct{}, flood)
	for range flood {
		next <- struct{}{}
	}
	close(next)
	for range 16 {
		wg.Go(func() {
			for range next {
				c, err := net.Dial("tcp", string(addr))
				if err != nil {
					t.Error(err)
					return
				}
				c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
				c.(*net.TCPConn).CloseWrite()
				c.SetReadDeadline(time.Now().Add(20 * time.Second))
				io.Copy(io.Discard, c) // until the rank closes it: refused
				c.Close()
			}
		})
	}
	wg.Wait()
	g0, err := New(ctx, st, Options{Rank: 0, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	defer g0.Close()
	g1 := <-rank1
	if g1 == nil {
		return
	}
	defer g1.Close()
	checkAllReduce(t, []*Group{g0, g1}, 100)
	g1.Close()
	if lines, total := refusals(logs); lines > 3 || total != flood {
		t.Errorf("%d connections refused: %d refusal lines counting %d, want at most 3 counting %d; %d lines in all", flood,
			lines, total, flood, logs.Len())
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
	_, err := New(ctx, st,
		Options{Rank: 0, Size: 2, Secret: []byte("a-different-secret-entirely"), ListenAddr: "127.0.0.1:0"})
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
	if !errors.Is(err, pg.ErrMismatch) || !errors.As(err, &ce) || ce.Peer != 1 ||
		!strings.Contains(err.Error(), "ChunkBytes") {
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
		if _, err := New(ctx, st, o); !errors.Is(err, pg.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "MaxWorldSize") {
			t.Errorf("New with Size %d: got %v, want pg.ErrInvalidArgument naming MaxWorldSize", size, err)
		}
	}
}
