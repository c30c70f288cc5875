package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/shedlog"
	"github.com/goddp/ddp/pg/internal/wire"
	"github.com/goddp/ddp/pg/store"
)

// acceptor admits the lower ranks during the rendezvous, then closes
// what arrives until its group closes (Note [probe listener]). Each
// connection is authenticated in its own goroutine, so a slow or hostile
// client cannot hold up the legitimate ones; one that fails the
// handshake is logged with its address and closed, and the acceptor
// keeps going. Refusals are rate-limited as the store's are (Note
// [rate-limited refusals] in pg/internal/shedlog): a flood of strangers
// gives two lines per interval, and a summary when the group forms.
type acceptor struct {
	ln   net.Listener
	o    Options
	log  *zap.Logger
	shed *shedlog.Log // refused connections
	wg   sync.WaitGroup

	mu      sync.Mutex
	pending map[net.Conn]struct{} // being authenticated
	got     []net.Conn            // admitted, by rank
	left    int                   // lower ranks not yet admitted
	done    chan struct{}         // closed when left reaches 0
	handed  bool                  // got was handed to the group: admit no more
}

func startAcceptor(ln net.Listener, o Options, log *zap.Logger) *acceptor {
	a := &acceptor{ln: ln, o: o, log: log, shed: shedlog.New(log, "", store.DefaultWarnInterval),
		pending: make(map[net.Conn]struct{}),
		got:     make([]net.Conn, o.Rank), left: o.Rank, done: make(chan struct{})}
	if a.left == 0 {
		close(a.done)
	}
	a.wg.Add(1)
	go a.loop()
	return a
}

func (a *acceptor) loop() {
	defer a.wg.Done()
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return // the listener was closed
		}
		a.mu.Lock()
		if a.handed { // a probe: Note [probe listener]
			a.mu.Unlock()
			c.Close()
			continue
		}
		a.pending[c] = struct{}{}
		a.mu.Unlock()
		a.wg.Add(1)
		go a.admit(c)
	}
}

// admit authenticates c and, if it is a lower rank not yet connected,
// keeps it.
func (a *acceptor) admit(c net.Conn) {
	defer a.wg.Done()
	rank, err := a.authenticate(c)
	a.mu.Lock()
	delete(a.pending, c)
	if err == nil && (a.handed || a.got[rank] != nil) {
		err = fmt.Errorf("%w: a second connection claims rank %d", pg.ErrMismatch, rank)
	}
	if err == nil {
		a.got[rank] = c
		if a.left--; a.left == 0 {
			close(a.done)
		}
	}
	a.mu.Unlock()
	if err != nil {
		a.shed.Note(refusal(err), c.RemoteAddr().String(), err)
		c.Close()
	}
}

// refusal is the class of a refused connection's error, by which
// refusals are counted.
func refusal(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("no handshake within %v", handshakeTimeout)
	case errors.Is(err, pg.ErrUnauthenticated):
		return "it failed the shared-secret handshake"
	case errors.Is(err, pg.ErrMismatch):
		return "it is not a rank this one expects (another job's, another configuration's, or one already connected)"
	}
	return "the handshake failed"
}

func (a *acceptor) authenticate(c net.Conn) (int, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	hello, err := wire.ServerHandshake(c, a.o.Secret)
	if err != nil {
		return 0, err
	}
	// Answer first, so that a dialer configured differently sees why.
	if err := wire.WriteFrame(c, wire.Header{Kind: kindHello}, helloOf(a.o).encode()); err != nil {
		return 0, err
	}
	peer, err := decodeHello(hello)
	if err != nil {
		return 0, err
	}
	if err := peer.check(a.o, 0, a.o.Rank); err != nil {
		return 0, err
	}
	rank := peer.rank
	a.mu.Lock()
	dup := a.handed || a.got[rank] != nil
	a.mu.Unlock()
	if dup {
		return 0, fmt.Errorf("%w: a second connection claims rank %d", pg.ErrMismatch, rank)
	}
	tune(c, a.o)
	return rank, c.SetDeadline(time.Time{})
}

// wait waits until every lower rank is admitted and puts them in conns.
func (a *acceptor) wait(ctx context.Context, conns []net.Conn) error {
	select {
	case <-a.done:
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		for j, c := range a.got {
			if c == nil {
				return connectErr(a.o, j, pg.ErrTimeout, fmt.Errorf("rank %d never connected: %w", j, context.Cause(ctx)))
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	copy(conns, a.got)
	a.handed = true
	a.shed.Flush() // the summary of the rendezvous's refusals, now
	return nil
}

// stop closes the listener and every connection not handed out, and
// waits for the acceptor's goroutines.
func (a *acceptor) stop() {
	a.ln.Close()
	defer a.shed.Close()
	a.mu.Lock()
	for c := range a.pending {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
	a.mu.Lock()
	if !a.handed {
		closeAll(a.got)
	}
	a.mu.Unlock()
}
