package wire

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// foreignServer listens on loopback and runs serve on every connection it
// accepts, until the test ends.
func foreignServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
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
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// silent accepts and never speaks, reading what comes until closed.
func silent(c net.Conn) {
	buf := make([]byte, 1024)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

func dialFor(t *testing.T, ctx context.Context, addr string, greeting time.Duration) (time.Duration, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	err = dialHandshake(ctx, conn, addr, secretA, []byte("hi"), 30*time.Second, greeting)
	return time.Since(start), err
}

// Note [foreign listener]: a listener that accepts and says nothing, or
// says something that is not goddp's greeting, fails the dialer with
// pg.ErrForeignListener naming the address, within the greeting's timeout
// and not the call's (30 s here); a server that hangs up before greeting
// (a goddp store shedding load) is not foreign, and a goddp server passes.
func TestDialHandshakeForeign(t *testing.T) {
	const greeting = 300 * time.Millisecond
	for _, c := range []struct {
		name    string
		serve   func(net.Conn)
		foreign string // what the error says; "" for not foreign
	}{
		{"silent", silent, "sent nothing in"},
		{"a short banner, then silence", func(c net.Conn) { c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n")); silent(c) },
			`answered "SSH-2.0-OpenSSH_9.6\r\n"`},
		{"garbage", func(c net.Conn) { c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")); silent(c) },
			`answered "HTTP/1.1 400 Bad Request`},
		{"a short banner, then closed", func(c net.Conn) { c.Write([]byte("220 ftp\r\n")); c.Close() },
			`answered "220 ftp\r\n"`},
		{"closed at once", func(c net.Conn) { c.Close() }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := foreignServer(t, c.serve)
			took, err := dialFor(t, context.Background(), addr, greeting)
			if c.foreign == "" {
				if err == nil || errors.Is(err, pg.ErrForeignListener) {
					t.Fatalf("got %v; want a failure that is not pg.ErrForeignListener", err)
				}
				return
			}
			if !errors.Is(err, pg.ErrForeignListener) || !errors.Is(err, pg.ErrUnauthenticated) ||
				!strings.Contains(err.Error(), addr) ||
				!strings.Contains(err.Error(), "something else is listening there") || !strings.Contains(err.Error(), c.foreign) {
				t.Fatalf("got %v; want pg.ErrForeignListener naming %s and saying %q", err, addr, c.foreign)
			}
			if took > greeting+2*time.Second {
				t.Fatalf("took %v, with a greeting timeout of %v", took, greeting)
			}
		})
	}
}

// A real goddp server passes DialHandshake, and ctx's end stops a wait
// for the greeting with ctx's cause, not as a foreign listener.
func TestDialHandshakeServerAndCancel(t *testing.T) {
	addr := foreignServer(t, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := ServerHandshake(c, secretA); err == nil {
			silent(c)
		}
	})
	if _, err := dialFor(t, context.Background(), addr, time.Second); err != nil {
		t.Fatalf("a goddp server: %v", err)
	}
	quiet := foreignServer(t, silent)
	cause := errors.New("the test is over")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(cause) })
	took, err := dialFor(t, ctx, quiet, 10*time.Second)
	if !errors.Is(err, cause) || errors.Is(err, pg.ErrForeignListener) || took > 5*time.Second {
		t.Fatalf("cancelled after 100ms: %v after %v; want the cause, at once", err, took)
	}
}

// Silence is foreign only past the greeting's own timeout: not when the
// call's deadline comes first, and never for RedialHandshake, whose server
// has already proven to be goddp's (a silent one is stalled).
func TestDialHandshakeSilenceWithinTheCallsDeadline(t *testing.T) {
	quiet := foreignServer(t, silent)
	for name, dial := range map[string]func(context.Context, net.Conn) error{
		"DialHandshake, ctx shorter than the greeting's timeout": func(ctx context.Context, c net.Conn) error {
			return DialHandshake(ctx, c, quiet, secretA, nil, 0)
		},
		"RedialHandshake": func(ctx context.Context, c net.Conn) error {
			return RedialHandshake(context.Background(), c, quiet, secretA, nil, 300*time.Millisecond)
		},
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = dial(ctx, conn)
			if err == nil || errors.Is(err, pg.ErrForeignListener) || time.Since(start) > 3*time.Second {
				t.Fatalf("after %v: %v; want a timeout that is not pg.ErrForeignListener", time.Since(start), err)
			}
		})
	}
}
