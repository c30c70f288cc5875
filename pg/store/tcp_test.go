package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

var secret = []byte("store-test-secret-0123456789")

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startServer starts a loopback server whose logs the test can inspect.
func startServer(t *testing.T, opts ServerOptions) (*Server, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	opts.Addr, opts.Logger = "127.0.0.1:0", zap.New(core)
	if opts.Secret == nil {
		opts.Secret = secret
	}
	s, err := NewServer(testCtx(t, 5*time.Second), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

func dial(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(testCtx(t, 10*time.Second), addr, ClientOptions{Secret: secret, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// checkWorks checks that a client still gets answers.
func checkWorks(t *testing.T, c *Client) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	if err := c.Set(ctx, "alive", []byte("yes")); err != nil {
		t.Fatalf("a good client stopped working: %v", err)
	}
	if v, err := c.Get(ctx, "alive"); err != nil || string(v) != "yes" {
		t.Fatalf("a good client stopped working: Get = %q, %v", v, err)
	}
}

// waitLog waits for a log entry at level whose message contains msg and
// that carries a non-empty "remote" field.
func waitLog(t *testing.T, logs *observer.ObservedLogs, level zapcore.Level, msg string) observer.LoggedEntry {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, e := range logs.FilterLevelExact(level).FilterMessageSnippet(msg).All() {
			if remote, ok := e.ContextMap()["remote"].(string); ok && remote != "" {
				return e
			}
		}
	}
	t.Fatalf("no %v log %q with a remote address; got %v", level, msg, logs.All())
	return observer.LoggedEntry{}
}

func TestTCPWrongSecretRefusedAndLogged(t *testing.T) {
	srv, logs := startServer(t, ServerOptions{})
	good := dial(t, srv.Addr())

	start := time.Now()
	c, err := Dial(testCtx(t, 10*time.Second), srv.Addr(), ClientOptions{Secret: []byte("not-the-job-secret-0123456789")})
	if !errors.Is(err, pg.ErrUnauthenticated) {
		t.Fatalf("Dial with the wrong secret = %v, %v; want pg.ErrUnauthenticated", c, err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("a refusal was retried for %v; it is final", elapsed)
	}
	e := waitLog(t, logs, zapcore.WarnLevel, "refused")
	if !strings.Contains(e.ContextMap()["error"].(string), "MAC mismatch") {
		t.Fatalf("refusal log does not say why: %v", e.ContextMap())
	}
	checkWorks(t, good)
}

func TestTCPRefusesShortSecrets(t *testing.T) {
	if _, err := NewServer(testCtx(t, time.Second),
		ServerOptions{Addr: "127.0.0.1:0", Secret: []byte("short")}); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("NewServer with a short secret: err = %v; want pg.ErrInvalidArgument", err)
	}
	if _, err := Dial(testCtx(t, time.Second), "127.0.0.1:1", ClientOptions{}); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("Dial without a secret: err = %v; want pg.ErrInvalidArgument", err)
	}
	if _, err := NewServer(testCtx(t, time.Second), ServerOptions{Secret: secret}); !errors.Is(err,
		pg.ErrInvalidArgument) {
		t.Fatalf("NewServer without an address: err = %v; want pg.ErrInvalidArgument", err)
	}
}

// rawConn opens a connection to srv, authenticated if hello is not nil.
func rawConn(t *testing.T, srv *Server, hello []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if hello != nil {
		if err := wire.ClientHandshake(conn, secret, hello); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// checkHungUp reads what the server sends until it closes the connection,
// and returns it.
func checkHungUp(t *testing.T, conn net.Conn) []byte {
	t.Helper()
	got, err := io.ReadAll(conn)
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the server did not hang up: %v (after %q)", err, got)
	}
	return got
}

func frame(kind uint8, payload []byte) []byte {
	var b bytes.Buffer
	wire.WriteFrame(&b, wire.Header{Kind: kind, Seq: 1}, payload)
	return b.Bytes()
}

func TestTCPGarbageBeforeHandshake(t *testing.T) {
	srv, logs := startServer(t, ServerOptions{})
	good := dial(t, srv.Addr())
	conn := rawConn(t, srv, nil)
	conn.Write([]byte("GET / HTTP/1.1\r\nHost: store\r\n\r\n" + strings.Repeat("garbage", 100)))
	got := checkHungUp(t, conn)
	if len(got) > 4+1+32+1 { // greeting, then at most the refusal byte
		t.Fatalf("the server sent %d bytes to an unauthenticated peer", len(got))
	}
	waitLog(t, logs, zapcore.WarnLevel, "refused")
	checkWorks(t, good)
}

func TestTCPWrongHelloRefused(t *testing.T) {
	srv, logs := startServer(t, ServerOptions{})
	checkHungUp(t, rawConn(t, srv, []byte("rank=3 purpose=allreduce")))
	waitLog(t, logs, zapcore.WarnLevel, "refused")
}

// TestTCPMalformedFrames: an authenticated peer that sends a bad frame or
// request gets a bad-request answer and is disconnected; the server and its
// other clients carry on.
func TestTCPMalformedFrames(t *testing.T) {
	setKey := wire.AppendString(nil, "k")
	tests := []struct {
		name string
		send []byte
	}{
		{"bad magic", bytes.Repeat([]byte{0x42}, wire.HeaderSize)},
		{"oversized frame", frame(uint8(opSet), make([]byte, 1025))},
		{"unknown op", frame(99, nil)},
		{"op zero", frame(0, nil)},
		{"truncated key", frame(uint8(opSet), setKey[:3])},
		{"set without value", frame(uint8(opSet), setKey)},
		{"trailing bytes", frame(uint8(opNumKeys), []byte{1})},
		{"wait claims 2^40 keys", frame(uint8(opWait), wire.AppendUint64(nil, 1<<40))},
	}
	srv, logs := startServer(t, ServerOptions{MaxFrame: 1024})
	good := dial(t, srv.Addr())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := rawConn(t, srv, []byte(helloStore))
			conn.Write(tt.send)
			got := checkHungUp(t, conn)
			h, err := wire.ParseHeader(got, 1<<20)
			if err != nil || h.Kind != statusBadRequest || int(h.Len) != len(got)-wire.HeaderSize {
				t.Fatalf("answer %q (%+v, %v); want one bad-request frame", got, h, err)
			}
			waitLog(t, logs, zapcore.WarnLevel, "malformed")
			checkWorks(t, good)
		})
	}
}

// TestTCPOversizedValueRefusedByClient: the client checks the frame cap
// before sending.
func TestTCPOversizedValueRefusedByClient(t *testing.T) {
	srv, _ := startServer(t, ServerOptions{})
	c, err := Dial(testCtx(t, 10*time.Second), srv.Addr(), ClientOptions{Secret: secret, MaxFrame: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set(testCtx(t, 10*time.Second), "k", make([]byte, 200)); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("err = %v; want pg.ErrInvalidArgument", err)
	}
	checkWorks(t, c)
}

func TestTCPTimeoutNamesEveryKey(t *testing.T) {
	srv, _ := startServer(t, ServerOptions{})
	c := dial(t, srv.Addr())
	err := c.Wait(testCtx(t, 100*time.Millisecond), "alpha", "beta")
	var te *TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("err = %v; want a *TimeoutError", err)
	}
	if te.Op != "wait" || len(te.Keys) != 2 || !strings.Contains(err.Error(), `"alpha", "beta"`) {
		t.Fatalf("timeout error %q (%+v) does not name both keys", err, te)
	}
	checkWorks(t, c) // the server answered the timeout; the pool is healthy
}

func TestTCPDialWaitsForServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	dialed := make(chan error, 1)
	go func() {
		c, err := Dial(testCtx(t, 20*time.Second), addr, ClientOptions{Secret: secret})
		if err == nil {
			checkWorks(t, c)
			c.Close()
		}
		dialed <- err
	}()
	time.Sleep(200 * time.Millisecond) // rank 0 is late
	srv, err := NewServer(testCtx(t, time.Second), ServerOptions{Addr: addr, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := <-dialed; err != nil {
		t.Fatalf("Dial before the server started: %v", err)
	}
}

func TestTCPDialTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = Dial(context.Background(), addr, ClientOptions{Secret: secret, Timeout: 200 * time.Millisecond})
	if !errors.Is(err, pg.ErrTimeout) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v; want a timeout naming %s", err, addr)
	}
}

func TestTCPMaxConns(t *testing.T) {
	srv, logs := startServer(t, ServerOptions{MaxConns: 2})
	good := dial(t, srv.Addr())         // one connection
	rawConn(t, srv, []byte(helloStore)) // two
	_, err := Dial(testCtx(t, 300*time.Millisecond), srv.Addr(), ClientOptions{Secret: secret})
	if !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("a third connection: err = %v; want a timeout (the server is full)", err)
	}
	waitLog(t, logs, zapcore.WarnLevel, "too many")
	checkWorks(t, good)
}
