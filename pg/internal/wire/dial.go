package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
)

// Note [foreign listener]
//
// A goddp server (the store, a rank's listener) writes its greeting as
// soon as it accepts a connection, before it reads a byte. So a dialer
// that has waited GreetingTimeout for the greeting, or that has read
// bytes which are not one, is not talking to goddp: another program holds
// the address (a stale MASTER_PORT, torchrun's own store, an ssh or HTTP
// server). DialHandshake fails at once then, with pg.ErrForeignListener,
// instead of waiting for the whole timeout of the call or retrying:
// nothing that program will say makes it the store. (A goddp process
// that is stopped, SIGSTOP or a debugger, looks the same from outside: its
// kernel accepts the connection and nobody greets; the message says so.)
// A server that closes the connection before greeting (a goddp server
// shedding load: store Note [admission]) is not foreign, and is retried
// as before.

// GreetingTimeout is how long DialHandshake waits for the server's
// greeting: Note [foreign listener].
const GreetingTimeout = 5 * time.Second

// longAgo is a deadline in the past, which ends blocked reads and writes.
var longAgo = time.Unix(1, 0)

// DialHandshake runs ClientHandshake on a connection dialed to addr, with
// deadlines of its own: the greeting within GreetingTimeout, the whole
// handshake within timeout (if positive) and ctx. A listener that does not
// speak goddp fails with an error wrapping pg.ErrForeignListener (Note
// [foreign listener]); ctx ending fails with its cause. The connection's
// deadline is left at the handshake's end; the caller clears it.
func DialHandshake(ctx context.Context, conn net.Conn, addr string, secret, hello []byte, timeout time.Duration) error {
	return dialHandshake(ctx, conn, addr, secret, hello, timeout, GreetingTimeout)
}

// RedialHandshake is DialHandshake to a server that has already proven
// to be goddp's (another connection of a store client): the greeting has
// no timeout of its own, since a silent server is stalled, not foreign.
func RedialHandshake(ctx context.Context, conn net.Conn, addr string, secret, hello []byte,
	timeout time.Duration) error {
	return dialHandshake(ctx, conn, addr, secret, hello, timeout, 0)
}

// dialHandshake is DialHandshake with the greeting's timeout given; 0:
// none of its own, and silence is not foreign.
func dialHandshake(ctx context.Context, conn net.Conn, addr string, secret, hello []byte, timeout,
	greeting time.Duration) error {
	start := time.Now()
	end := time.Time{}
	if timeout > 0 {
		end = start.Add(timeout)
	}
	if d, ok := ctx.Deadline(); ok && (end.IsZero() || d.Before(end)) {
		end = d
	}
	greetBy := end
	ownDeadline := greeting > 0 && (end.IsZero() || start.Add(greeting).Before(end)) // silence past it is foreign
	if ownDeadline {
		greetBy = start.Add(greeting)
	}
	var mu sync.Mutex // orders the deadline changes against ctx's end
	cancelled := false
	conn.SetWriteDeadline(end)
	conn.SetReadDeadline(greetBy)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		cancelled = true
		conn.SetDeadline(longAgo)
	})
	rec := &recorder{ReadWriter: conn}
	err := clientHandshake(rec, secret, hello, func() {
		mu.Lock()
		defer mu.Unlock()
		if !cancelled {
			conn.SetReadDeadline(end)
		}
	})
	if !stop() {
		if err == nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	}
	if err != nil && !rec.greeted && (ownDeadline || len(rec.got) > 0) {
		return foreign(addr, rec.got, err, time.Since(start))
	}
	return err
}

// foreign explains a handshake that failed before the greeting was read,
// or on a bad one: pg.ErrForeignListener, except for a server that hung up
// before saying anything, as a goddp server shedding load does.
func foreign(addr string, got []byte, err error, waited time.Duration) error {
	var ne net.Error
	timedOut := errors.As(err, &ne) && ne.Timeout()
	switch {
	case len(got) == 0 && timedOut:
		return &foreignError{fmt.Sprintf("%s accepted the connection but sent nothing in %v, where a goddp server greets "+
			"at once (unless its process is stopped)", addr, waited.Round(time.Millisecond))}
	case len(got) == 0:
		return err // closed or reset before a byte: retried by the caller
	case len(got) >= 4 && [4]byte(got[:4]) == magic:
		return err // goddp, of another version: ClientHandshake says so
	case len(got) < greetingSize && !timedOut && !errors.Is(err, io.ErrUnexpectedEOF):
		return err
	}
	return &foreignError{fmt.Sprintf("%s answered %q, which is not goddp's greeting", addr, clip(got))}
}

// foreignError is a listener that is not goddp's (Note [foreign
// listener]): pg.ErrForeignListener, and pg.ErrUnauthenticated, as every
// failed handshake.
type foreignError struct{ what string }

func (e *foreignError) Error() string {
	return e.what + ": " + pg.ErrForeignListener.Error() + ", not a goddp store or rank"
}

func (e *foreignError) Is(target error) bool {
	return target == pg.ErrForeignListener || target == pg.ErrUnauthenticated
}

// clip is at most 32 bytes of b.
func clip(b []byte) []byte { return b[:min(len(b), 32)] }

// recorder keeps the first greetingSize bytes read, and whether a whole
// goddp greeting was.
type recorder struct {
	io.ReadWriter
	got     []byte
	greeted bool
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.ReadWriter.Read(p)
	if room := greetingSize - len(r.got); room > 0 {
		r.got = append(r.got, p[:min(n, room)]...)
		r.greeted = len(r.got) == greetingSize && [4]byte(r.got[:4]) == magic && r.got[4] == version
	}
	return n, err
}
