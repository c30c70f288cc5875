package store

import (
	"context"
	"net"
	"sync"
)

// connPool is the connection pool of a store client (Client, C10dClient):
// idle connections are reused, busy ones are tracked so that close can
// interrupt calls in flight, and at most maxIdle stay open when idle.
type connPool struct {
	dial func(ctx context.Context) (net.Conn, error) // opens one more connection

	mu     sync.Mutex
	idle   []net.Conn
	busy   map[net.Conn]struct{}
	closed bool
}

func newConnPool(first net.Conn, dial func(context.Context) (net.Conn, error)) connPool {
	return connPool{dial: dial, idle: []net.Conn{first}, busy: make(map[net.Conn]struct{})}
}

// take borrows an idle connection or opens a new one.
func (p *connPool) take(ctx context.Context) (net.Conn, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(p.idle); n > 0 {
		conn := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.busy[conn] = struct{}{}
		p.mu.Unlock()
		return conn, nil
	}
	p.mu.Unlock()
	conn, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		conn.Close()
		return nil, ErrClosed
	}
	p.busy[conn] = struct{}{}
	return conn, nil
}

// give returns a borrowed connection: to the pool if it is healthy and
// there is room, closed otherwise.
func (p *connPool) give(conn net.Conn, healthy bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.busy, conn)
	if healthy && !p.closed && len(p.idle) < maxIdle {
		p.idle = append(p.idle, conn)
		return
	}
	conn.Close()
}

func (p *connPool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// close closes every connection, idle and busy; later takes fail with
// ErrClosed. It is idempotent.
func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, conn := range p.idle {
		conn.Close()
	}
	p.idle = nil
	for conn := range p.busy {
		conn.Close()
	}
}
