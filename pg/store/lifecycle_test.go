package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

func (s *Server) numConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func waitConns(t *testing.T, s *Server, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if s.numConns() == want {
			return
		}
	}
	t.Fatalf("server holds %d connections, want %d", s.numConns(), want)
}

// TestServerCloseReleasesEverything: Close ends parked requests, half-done
// handshakes and idle connections, and leaves no goroutine behind.
func TestServerCloseReleasesEverything(t *testing.T) {
	srv, err := NewServer(testCtx(t, time.Second), ServerOptions{Addr: "127.0.0.1:0", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	clients := []*Client{dial(t, srv.Addr()), dial(t, srv.Addr())}
	checkWorks(t, clients[0])
	rawConn(t, srv, nil) // connected, never finishes the handshake

	parked := make(chan error, 1)
	go func() {
		_, err := clients[1].Get(testCtx(t, time.Hour), "never")
		parked <- err
	}()
	waitConns(t, srv, 3)
	time.Sleep(20 * time.Millisecond) // let the Get reach the server

	start := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if err := <-parked; !errors.Is(err, pg.ErrComm) {
		t.Fatalf("a Get parked on a closed server: err = %v; want pg.ErrComm", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("Close took %v", elapsed)
	}
	if err := clients[0].Set(testCtx(t, time.Second), "k", nil); err == nil {
		t.Fatal("Set on a closed server succeeded")
	}
	for _, c := range clients {
		c.Close()
	}
	goleak.VerifyNone(t)
}

// TestServerUnparksWhenClientLeaves: a client that hangs up while its Get
// is parked frees the server's goroutine and connection at once, not when
// the wait it asked for runs out.
func TestServerUnparksWhenClientLeaves(t *testing.T) {
	srv, _ := startServer(t, ServerOptions{})
	conn := rawConn(t, srv, []byte(helloStore))
	req := request{op: opGet, keys: []string{"never"}, wait: time.Hour}
	if err := wire.WriteFrame(conn, wire.Header{Kind: uint8(opGet), Seq: 1}, req.appendPayload(nil)); err != nil {
		t.Fatal(err)
	}
	waitConns(t, srv, 1)
	time.Sleep(20 * time.Millisecond)
	conn.Close()
	waitConns(t, srv, 0)
}

func TestClientClose(t *testing.T) {
	srv, _ := startServer(t, ServerOptions{})
	c := dial(t, srv.Addr())
	parked := make(chan error, 1)
	go func() {
		_, err := c.Get(testCtx(t, time.Hour), "never")
		parked <- err
	}()
	time.Sleep(30 * time.Millisecond) // let the Get park on the pooled connection
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-parked; !errors.Is(err, ErrClosed) {
		t.Fatalf("a Get blocked in Close: err = %v; want ErrClosed", err)
	}
	if err := c.Set(context.Background(), "k", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close: err = %v; want ErrClosed", err)
	}
	waitConns(t, srv, 0)
}

// TestClientCancelDiscardsConnection: a cancelled call closes its
// connection, so no late answer can be read by the next call.
func TestClientCancelDiscardsConnection(t *testing.T) {
	srv, _ := startServer(t, ServerOptions{})
	c := dial(t, srv.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	if _, err := c.Get(ctx, "late"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	if err := c.Set(testCtx(t, 5*time.Second), "late", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(testCtx(t, 5*time.Second), "late"); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
}
