package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
	"github.com/goddp/ddp/pg/store"
)

// addrKey is the store key under which rank publishes its address.
func addrKey(rank int) string { return "tcp/addr/" + strconv.Itoa(rank) }

// connectErr is New's error.
func connectErr(o Options, peer int, kind, err error) error {
	return &pg.CollectiveError{Op: "connect", Rank: o.Rank, Peer: peer, Kind: kind, Err: err}
}

// rendezvous builds this rank's row of the full mesh: it claims its rank
// (Note [duplicate ranks]), publishes its address, dials every higher
// rank and accepts every lower one. Every connection passes the HMAC
// handshake both ways; the hello names the dialer's rank and the
// accepting side answers with its own. It returns the connections by peer
// rank, and the listener kept open for probes with every rank's address
// (Note [probe listener]).
func rendezvous(ctx context.Context, st store.Store, o Options, log *zap.Logger) ([]net.Conn, *probes, error) {
	conns := make([]net.Conn, o.Size)
	if o.Size == 1 {
		return conns, nil, nil
	}
	ln, err := net.Listen("tcp", o.ListenAddr)
	if err != nil {
		return nil, nil, connectErr(o, pg.NoPeer, pg.ErrComm, err)
	}
	acc := startAcceptor(ln, o, log)
	ok := false
	defer func() {
		if !ok {
			acc.stop()
			closeAll(conns)
		}
	}()
	adv, err := o.advertise(ln.Addr())
	if err != nil {
		return nil, nil, connectErr(o, pg.NoPeer, pg.ErrInvalidArgument, err)
	}
	if err := claimRank(ctx, st, o, whoAmI(adv)); err != nil {
		return nil, nil, err
	}
	wctx, watch := watchFailure(ctx, st, o)
	addrs := make([]string, o.Size)
	addrs[o.Rank] = adv
	err = mesh(wctx, st, o, adv, acc, conns, addrs)
	if ferr := watch.stop(ctx); ferr != nil {
		return nil, nil, ferr
	}
	if err != nil {
		return nil, nil, err
	}
	ok = true
	readLowerAddrs(ctx, st, o, addrs, log)
	log.Debug("mesh connected", zap.String("addr", adv))
	return conns, &probes{acc: acc, addrs: addrs}, nil
}

// mesh publishes this rank's address adv, dials the higher ranks and
// waits for acc to admit the lower ones, filling conns (and the higher
// ranks' addresses).
func mesh(ctx context.Context, st store.Store, o Options, adv string, acc *acceptor, conns []net.Conn,
	addrs []string) error {
	if err := st.Set(ctx, addrKey(o.Rank), []byte(adv)); err != nil {
		return connectErr(o, pg.NoPeer, storeKind(err), fmt.Errorf("publishing this rank's address: %w", err))
	}
	for j := o.Rank + 1; j < o.Size; j++ {
		var err error
		if conns[j], addrs[j], err = dialPeer(ctx, st, o, j); err != nil {
			return err
		}
	}
	return acc.wait(ctx, conns)
}

func storeKind(err error) error {
	if errors.Is(err, pg.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return pg.ErrTimeout
	}
	return pg.ErrComm
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// dialPeer connects to rank j, retrying while j's listener is not yet
// reachable, and authenticates it. It returns the connection and j's
// address.
func dialPeer(ctx context.Context, st store.Store, o Options, j int) (net.Conn, string, error) {
	addr, err := st.Get(ctx, addrKey(j))
	if err != nil {
		return nil, "", connectErr(o, j, storeKind(err), fmt.Errorf("reading rank %d's address: %w", j, err))
	}
	var d net.Dialer
	backoff := 10 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "tcp", string(addr))
		if err == nil {
			if err := clientHello(ctx, c, o, j); err != nil {
				c.Close()
				kind := pg.ErrComm
				for _, k := range []error{pg.ErrUnauthenticated, pg.ErrMismatch} {
					if errors.Is(err, k) {
						kind = k
					}
				}
				return nil, "", connectErr(o, j, kind, fmt.Errorf("rank %d at %s: %w", j, addr, err))
			}
			return c, string(addr), nil
		}
		select {
		case <-ctx.Done():
			return nil, "", connectErr(o, j, pg.ErrTimeout,
				fmt.Errorf("dialing rank %d at %s: %w (last error: %v)", j, addr, context.Cause(ctx), err))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// clientHello authenticates a dialed connection and checks that it
// reached rank j of this job.
func clientHello(ctx context.Context, c net.Conn, o Options, j int) error {
	// The greeting within wire.GreetingTimeout: wire's Note [foreign listener].
	if err := wire.DialHandshake(ctx, c, c.RemoteAddr().String(), o.Secret, helloOf(o).encode(),
		handshakeTimeout); err != nil {
		return err
	}
	c.SetDeadline(handshakeDeadline(ctx))
	var hb [wire.HeaderSize]byte
	h, err := wire.ReadHeader(c, &hb, maxControl)
	if err != nil {
		return err
	}
	if h.Kind != kindHello {
		return fmt.Errorf("%w: expected the peer's hello, got frame kind %d", pg.ErrComm, h.Kind)
	}
	p := make([]byte, h.Len)
	if _, err := io.ReadFull(c, p); err != nil {
		return err
	}
	peer, err := decodeHello(p)
	if err != nil {
		return err
	}
	if err := peer.check(o, j, j+1); err != nil {
		return err
	}
	tune(c, o)
	return c.SetDeadline(time.Time{})
}

func handshakeDeadline(ctx context.Context) time.Time {
	d := time.Now().Add(handshakeTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		return cd
	}
	return d
}

// tune sets the socket options every link uses.
func tune(c net.Conn, o Options) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetNoDelay(true)
	if o.SocketBuffer > 0 {
		tc.SetReadBuffer(o.SocketBuffer)
		tc.SetWriteBuffer(o.SocketBuffer)
	}
}
