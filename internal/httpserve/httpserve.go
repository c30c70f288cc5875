package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Limits bound what one client may take of a server.
type Limits struct {
	ReadHeader     time.Duration // to read a request's headers (http.Server.ReadHeaderTimeout)
	Read           time.Duration // to read a whole request (ReadTimeout)
	Write          time.Duration // to write a response, from the end of its headers' reading (WriteTimeout)
	Idle           time.Duration // a keep-alive connection may wait this long for its next request (IdleTimeout)
	MaxHeaderBytes int           // the request line and headers, at most
	MaxConns       int           // connections open at once; the next ones wait to be accepted
}

// DefaultWrite is DefaultLimits' Write: long enough for a profile or
// trace of MaxProfile and its transfer.
const DefaultWrite = MaxProfile + 30*time.Second

// MaxProfile is the longest profile or trace a server of this module
// takes (net/http/pprof's seconds parameter); pprof itself refuses one
// that would outlast the server's write timeout.
const MaxProfile = 60 * time.Second

// DefaultLimits are the limits of ddp-train's servers: enough for a
// Prometheus scrape, Kubernetes' probes and a person with curl or go
// tool pprof, far from what exhausts a process's file descriptors.
func DefaultLimits() Limits {
	return Limits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: DefaultWrite,
		Idle: 30 * time.Second, MaxHeaderBytes: 16 << 10, MaxConns: 32}
}

// Server is one HTTP server on its own listener.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Start listens on addr and serves h there within l, until Close.
func Start(ctx context.Context, addr string, h http.Handler, l Limits) (*Server, error) {
	if l.MaxConns < 1 {
		return nil, errors.New("httpserve: MaxConns must be at least 1")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: LimitListener(ln, l.MaxConns), done: make(chan struct{}),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: l.ReadHeader, ReadTimeout: l.Read, WriteTimeout: l.Write,
			IdleTimeout: l.Idle, MaxHeaderBytes: l.MaxHeaderBytes}}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(s.ln) // returns http.ErrServerClosed at Close, or the listener's error
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close closes the listener and every connection, and returns once the
// server has stopped. A nil Server is closed already.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.done
	return err
}

// LimitListener returns a listener that has at most n of ln's connections
// open at once: Accept waits, leaving the next connections in the
// kernel's accept queue, until one of them is closed. (As
// golang.org/x/net/netutil.LimitListener, which this module does not
// otherwise need.)
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{} // closed by Close: stop waiting for a slot
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back once, at its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Loopback reports whether r came over a loopback interface: the client
// connected from a loopback address to one (127.0.0.0/8, ::1). A remote
// client cannot send from such an address, and a local one that dials
// the machine's other addresses is not on loopback either.
func Loopback(r *http.Request) bool {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return local != nil && isLoopback(local.String()) && isLoopback(r.RemoteAddr)
}

// isLoopback reports whether hostport's host is a loopback IP address.
func isLoopback(hostport string) bool {
	ap, err := netip.ParseAddrPort(hostport)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}
