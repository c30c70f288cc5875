package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Secret is the job's shared secret; the server must hold the same.
	Secret []byte
	// Timeout bounds every call whose ctx has no deadline, and Dial's
	// retries; zero means DefaultTimeout (300 s, as c10d's TCPStore).
	Timeout time.Duration
	// Logger receives dial retries; nil means none.
	Logger *zap.Logger
	// MaxFrame caps a response's payload; zero means DefaultMaxFrame.
	MaxFrame uint32
}

// maxIdle is how many idle connections a Client keeps for reuse.
const maxIdle = 4

// Client is a Store backed by a Server, c10d's TCPStore client. It is safe
// for concurrent use: each call borrows a connection from a small pool, or
// opens one, so a Get parked on the server never delays another caller's
// Set.
type Client struct {
	addr     string
	secret   []byte
	timeout  time.Duration
	log      *zap.Logger
	maxFrame uint32
	seq      atomic.Uint64

	pool connPool
}

var _ Store = (*Client)(nil)

// Dial connects to the server at addr, retrying with backoff until ctx
// ends or opts.Timeout passes, since rank 0's server may start after the
// other ranks. A server that refuses the secret is not retried.
func Dial(ctx context.Context, addr string, opts ClientOptions) (*Client, error) {
	if len(opts.Secret) < wire.MinSecret {
		return nil, fmt.Errorf("%w: store: dial %s: %w", pg.ErrInvalidArgument, addr, wire.ErrNoSecret)
	}
	c := &Client{
		addr:     addr,
		secret:   clone(opts.Secret),
		timeout:  orDefault(opts.Timeout),
		log:      orNop(opts.Logger),
		maxFrame: opts.MaxFrame,
	}
	if c.maxFrame == 0 {
		c.maxFrame = DefaultMaxFrame
	}
	ctx, cancel := bound(ctx, c.timeout)
	defer cancel()
	conn, err := c.dialRetry(ctx)
	if err != nil {
		return nil, err
	}
	c.pool = newConnPool(conn, c.dialPooled)
	return c, nil
}

// Addr returns the server address the client dials.
func (c *Client) Addr() string { return c.addr }

// Close closes every connection; calls in flight fail with ErrClosed. It
// does not stop the server. Close is idempotent.
func (c *Client) Close() error {
	c.pool.close()
	return nil
}

func (c *Client) dialRetry(ctx context.Context) (net.Conn, error) {
	start := time.Now()
	backoff := 10 * time.Millisecond
	for {
		conn, err := c.dialOnce(ctx, true)
		if err == nil {
			return conn, nil
		}
		if !retryable(err) {
			return nil, err
		}
		c.log.Debug("store: server not reachable yet; retrying", zap.String("addr", c.addr), zap.Error(err),
			zap.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: store: could not reach the server at %s within %v: %w", pg.ErrTimeout, c.addr,
					time.Since(start).Round(time.Millisecond), err)
			}
			return nil, fmt.Errorf("store: dial %s: %w", c.addr, context.Cause(ctx))
		}
	}
}

// retryable reports whether a dial failure may pass: nobody listening yet,
// or a server that hung up mid-handshake (closing, or full). A clean
// refusal of the secret is final, and so is an address where another
// program listens.
func retryable(err error) bool {
	if errors.Is(err, pg.ErrForeignListener) { // wire: Note [foreign listener]
		return false
	}
	if !errors.Is(err, pg.ErrUnauthenticated) {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// dialPooled opens one more connection for a call. A server that sheds
// load (Note [admission]) hangs up during the handshake: that is retried
// with backoff while ctx allows. A refused connection is not, so a call
// to a dead server fails at once.
func (c *Client) dialPooled(ctx context.Context) (net.Conn, error) {
	backoff := 5 * time.Millisecond
	for {
		conn, err := c.dialOnce(ctx, false)
		if err == nil || !hungUp(err) {
			return conn, err
		}
		c.log.Debug("store: the server hung up during the handshake; retrying", zap.String("addr", c.addr), zap.Error(err))
		select {
		case <-time.After(backoff):
			backoff = min(2*backoff, 250*time.Millisecond)
		case <-ctx.Done():
			return nil, err
		}
	}
}

// hungUp reports whether the peer closed the connection.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// dialOnce opens and authenticates one connection. The first, before
// the server has proven to be goddp's, waits wire.GreetingTimeout for its
// greeting (wire's Note [foreign listener]); later ones wait as long as
// ctx allows, since a silent server then is a stalled one.
func (c *Client) dialOnce(ctx context.Context, first bool) (net.Conn, error) {
	conn, err := new(net.Dialer).DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	handshake := wire.RedialHandshake
	if first {
		handshake = wire.DialHandshake
	}
	err = handshake(ctx, conn, c.addr, c.secret, []byte(helloStore), 0)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("store: connecting to %s: %w", c.addr, err)
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}
