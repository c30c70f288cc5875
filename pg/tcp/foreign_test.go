package tcp

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// A peer address where another program listens (a stale address in the
// store, now someone else's port) and accepts without a word: the dialing
// rank fails within wire.GreetingTimeout (5 s), not the handshake's 10 s
// or the group's timeout, with pg.ErrForeignListener naming the address:
// wire's Note [foreign listener].
func TestForeignListenerAtPeerAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	})
	defer func() {
		ln.Close()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	foreign := ln.Addr().String()
	if err := st.Set(ctx, addrKey(1), []byte(foreign)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	g, err := New(ctx, st, Options{Rank: 0, Size: 2, Secret: testSecret, ListenAddr: "127.0.0.1:0", Timeout: time.Minute})
	if err == nil {
		g.Close()
	}
	took := time.Since(start)
	if !errors.Is(err, pg.ErrForeignListener) || !strings.Contains(err.Error(), foreign) ||
		!strings.Contains(err.Error(), "something else is listening there") || took > 8*time.Second {
		t.Fatalf("after %v: %v; want pg.ErrForeignListener naming %s within 8 s", took, err, foreign)
	}
	t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
}
