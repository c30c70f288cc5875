package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/shedlog"
	"github.com/goddp/ddp/pg/internal/wire"
)

const (
	// DefaultMaxConns caps a Server's open connections unless set. A rank
	// of a TCP process group holds two during its rendezvous (one parked
	// on its peers' addresses, one on the job's failure key), so this
	// fits jobs of 2,000 ranks with room for the unauthenticated ones.
	DefaultMaxConns = 4096
	// DefaultMaxFrame caps a store frame's payload, and so a key plus its
	// value, unless set.
	DefaultMaxFrame = 16 << 20
	// DefaultHandshakeTimeout bounds how long a new connection may take to
	// authenticate, unless set: the handshake is two round trips.
	DefaultHandshakeTimeout = 3 * time.Second
	// DefaultMaxUnauthenticated caps the connections still in the
	// handshake, unless set (Note [admission]).
	DefaultMaxUnauthenticated = 256
	// DefaultMaxUnauthenticatedPerHost caps the connections from one
	// remote host still in the handshake, unless set.
	DefaultMaxUnauthenticatedPerHost = 64
	// DefaultWarnInterval is how often, at most, a Server logs a summary
	// of the connections it refused, unless set (Note [rate-limited
	// refusals]).
	DefaultWarnInterval = 10 * time.Second
	// replyTimeout bounds writing one response.
	replyTimeout = 10 * time.Second
	// helloStore is what store clients say in the handshake.
	helloStore = "goddp-store"
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Addr is the address to listen on, always explicit: "127.0.0.1:0"
	// (a free loopback port), "127.0.0.1:29500", ":29500" (every
	// interface). A single-machine job should listen on loopback.
	Addr string
	// Secret is the job's shared secret, at least 16 bytes. Every
	// connection must prove it holds it before a request is read.
	Secret []byte
	// Logger receives refusals and protocol errors, rate-limited to
	// about one summary line per WarnInterval; nil means none.
	Logger *zap.Logger
	// MaxConns caps open connections, authenticated or not; zero means
	// DefaultMaxConns.
	MaxConns int
	// MaxFrame caps a request's payload; zero means DefaultMaxFrame.
	MaxFrame uint32
	// HandshakeTimeout bounds a new connection's handshake; zero means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxUnauthenticated caps the connections still in the handshake;
	// zero means DefaultMaxUnauthenticated. Over it, or over
	// MaxUnauthenticatedPerHost, the oldest pending connection that has
	// sent nothing is closed, or else the new one (Note [admission]).
	MaxUnauthenticated int
	// MaxUnauthenticatedPerHost caps the connections from one remote host
	// still in the handshake; zero means DefaultMaxUnauthenticatedPerHost.
	MaxUnauthenticatedPerHost int
	// MaxInflight is the budget for the bytes of the request frames read
	// at once, across every connection; zero means DefaultMaxInflight.
	// It is raised to MaxFrame if lower (Note [frame budget]).
	MaxInflight int64
	// WarnInterval is how often, at most, refused connections are
	// summarised in the log after the first is logged; zero means
	// DefaultWarnInterval.
	WarnInterval time.Duration
}

// Server is the TCP store's server, c10d's TCPStore master daemon: it keeps
// the table in memory and answers Clients. Get and Wait park on the server
// until their keys are set or the wait the client asked for runs out.
type Server struct {
	ln        net.Listener
	table     *HashStore
	secret    []byte
	log       *zap.Logger
	maxConns  int
	maxFrame  uint32
	handshake time.Duration
	shed      *shedlog.Log // Note [rate-limited refusals] (pg/internal/shedlog)
	budget    *budget

	wg        sync.WaitGroup // the accept loop and every connection
	closeOnce sync.Once
	closeErr  error
	done      chan struct{} // closed by Close

	mu    sync.Mutex
	conns map[net.Conn]struct{} // every open connection
	adm   admission             // those still in the handshake
}

// NewServer listens on opts.Addr and serves until Close.
func NewServer(ctx context.Context, opts ServerOptions) (*Server, error) {
	if opts.Addr == "" {
		return nil, fmt.Errorf("%w: store: ServerOptions.Addr is empty; listen addresses are explicit (e.g. 127.0.0.1:0)",
			pg.ErrInvalidArgument)
	}
	if len(opts.Secret) < wire.MinSecret {
		return nil, fmt.Errorf("%w: store: server: %w", pg.ErrInvalidArgument, wire.ErrNoSecret)
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", opts.Addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("store: listen on %s: %w: the port is in use, so something else is listening there; free "+
			"it, or give the job another port (MASTER_PORT)", opts.Addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("store: listen on %s: %w", opts.Addr, err)
	}
	s := &Server{
		ln:        ln,
		table:     NewHashStore(HashStoreOptions{}), // blocking calls get their deadline from the request
		secret:    clone(opts.Secret),
		log:       orNop(opts.Logger),
		maxConns:  positive(opts.MaxConns, DefaultMaxConns),
		maxFrame:  opts.MaxFrame,
		handshake: positive(opts.HandshakeTimeout, DefaultHandshakeTimeout),
		shed:      shedlog.New(orNop(opts.Logger), "store: ", positive(opts.WarnInterval, DefaultWarnInterval)),
		done:      make(chan struct{}),
		conns:     make(map[net.Conn]struct{}),
		adm: admission{
			maxPending: positive(opts.MaxUnauthenticated, DefaultMaxUnauthenticated),
			maxPerHost: positive(opts.MaxUnauthenticatedPerHost, DefaultMaxUnauthenticatedPerHost),
			byHost:     make(map[string]int),
		},
	}
	if s.maxFrame == 0 {
		s.maxFrame = DefaultMaxFrame
	}
	inflight := opts.MaxInflight
	if inflight <= 0 {
		inflight = DefaultMaxInflight
	}
	s.budget = newBudget(max(inflight, int64(s.maxFrame)), s.done)
	s.wg.Add(1)
	go s.acceptLoop()
	s.log.Info("store: server listening", zap.String("addr", s.Addr()))
	return s, nil
}

// ServerStats are a Server's counters.
type ServerStats struct {
	// Open is the number of open connections, and Pending how many of
	// them are still in the handshake.
	Open, Pending int
	// Shed counts the connections closed before they authenticated:
	// evicted or refused at a cap, timed out, or failed the handshake.
	Shed int64
	// InflightBytes is the memory held now by request frames being read
	// or handled, and PeakInflightBytes the most it has been.
	InflightBytes, PeakInflightBytes int64
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	used, peak := s.budget.stats()
	s.mu.Lock()
	defer s.mu.Unlock()
	return ServerStats{Open: len(s.conns), Pending: s.adm.queue.Len(), Shed: s.shed.Count(),
		InflightBytes: used, PeakInflightBytes: peak}
}

// Addr returns the address the server listens on, with the port it got.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, fails parked requests, closes every connection
// and waits for all of the server's goroutines to end. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		close(s.done)
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.closeErr = s.ln.Close()
		s.table.Close()
		s.wg.Wait()
		s.shed.Close()
	})
	return s.closeErr
}

func (s *Server) closing() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if s.closing() {
				return
			}
			// Out of file descriptors and the like: wait, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("store: accept failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			select {
			case <-time.After(backoff):
			case <-s.done:
				return
			}
			continue
		}
		backoff = 0
		if p := s.track(conn); p != nil {
			go s.serve(p)
		}
	}
}

// track registers conn as pending and counts its goroutine, or closes it
// when the server is closing or a cap leaves no room even after evicting
// idle pending connections (Note [admission]).
func (s *Server) track(conn net.Conn) *pending {
	remote := conn.RemoteAddr().String()
	p := &pending{conn: conn, host: hostOf(remote)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing() {
		conn.Close()
		return nil
	}
	for {
		why := s.adm.overCap(p.host, len(s.conns), s.maxConns)
		if why == "" {
			break
		}
		scope := ""
		if s.adm.byHost[p.host] >= s.adm.maxPerHost {
			scope = p.host
		}
		v := s.adm.victim(scope)
		if v == nil {
			s.shed.Note(why, remote, nil)
			conn.Close()
			return nil
		}
		s.adm.remove(v)
		delete(s.conns, v.conn)
		v.conn.Close()
		s.shed.Note("idle connection closed: "+why, v.conn.RemoteAddr().String(), nil)
	}
	s.adm.add(p)
	s.conns[conn] = struct{}{}
	s.wg.Add(1)
	return p
}

func (s *Server) untrack(p *pending) {
	p.conn.Close()
	s.mu.Lock()
	s.adm.remove(p)
	delete(s.conns, p.conn)
	s.mu.Unlock()
	s.wg.Done()
}

// serve authenticates p, then answers its requests one at a time.
func (s *Server) serve(p *pending) {
	defer s.untrack(p)
	conn := p.conn
	if !s.authenticate(p) {
		return
	}
	log := s.log.With(zap.String("remote", conn.RemoteAddr().String()))
	br := bufio.NewReader(conn)
	var hb [wire.HeaderSize]byte
	for {
		h, err := wire.ReadHeader(br, &hb, s.maxFrame)
		if err != nil {
			s.drop(conn, log, h.Seq, err)
			return
		}
		charge := s.budget.open(int64(min(h.Len, firstChunk)))
		req, err := s.readRequest(conn, br, h, charge)
		if err != nil {
			charge.close()
			s.drop(conn, log, h.Seq, err)
			return
		}
		if req.blocks() { // its keys were copied out of the frame
			charge.close()
		}
		status, body, keep := s.handle(conn, br, req)
		charge.close()
		if !keep || s.reply(conn, h.Seq, status, body) != nil {
			return
		}
	}
}

// authenticate runs the handshake on p within the handshake timeout and,
// if it passes, moves p from pending to authenticated.
func (s *Server) authenticate(p *pending) bool {
	p.conn.SetDeadline(time.Now().Add(s.handshake))
	hello, err := wire.ServerHandshake(p, s.secret)
	if err == nil && string(hello) != helloStore {
		err = fmt.Errorf("%w: peer introduced itself as %q, not as a store client", pg.ErrUnauthenticated, truncate(hello))
	}
	s.mu.Lock()
	evicted := !s.adm.remove(p)
	s.mu.Unlock()
	switch {
	case evicted || s.closing():
		return false
	case errors.Is(err, errDeadline):
		s.shed.Note(fmt.Sprintf("no handshake within %v", s.handshake), p.conn.RemoteAddr().String(), err)
		return false
	case err != nil:
		s.shed.Note("it failed the shared-secret handshake", p.conn.RemoteAddr().String(), err)
		return false
	}
	p.conn.SetDeadline(time.Time{})
	return true
}

// readRequest reads and decodes the payload of the request whose header
// is h, charging its bytes to c (Note [frame budget]).
func (s *Server) readRequest(conn net.Conn, br *bufio.Reader, h wire.Header, c *charge) (request, error) {
	payload, err := readFrame(stallReader{conn, br}, int(h.Len), func(delta int) error {
		return c.grow(int64(delta))
	})
	if err != nil {
		return request{}, err
	}
	conn.SetReadDeadline(time.Time{})
	return decodeRequest(h.Kind, payload)
}

// drop ends a connection whose read failed. A malformed frame or request
// (pg.ErrComm from wire or decodeRequest) is answered and logged; a peer
// that merely hung up is not.
func (s *Server) drop(conn net.Conn, log *zap.Logger, seq uint64, err error) {
	if errors.Is(err, errOverBudget) && !s.closing() {
		s.shed.Note("a request frame found no room in the memory budget", conn.RemoteAddr().String(), err)
		s.reply(conn, seq, statusError, []byte(err.Error()))
		return
	}
	if !errors.Is(err, pg.ErrComm) || s.closing() {
		log.Debug("store: connection ended", zap.Error(err))
		return
	}
	log.Warn("store: dropping connection after a malformed request", zap.Error(err))
	s.reply(conn, seq, statusBadRequest, []byte(err.Error()))
}

func (s *Server) reply(conn net.Conn, seq uint64, status uint8, body []byte) error {
	conn.SetWriteDeadline(time.Now().Add(replyTimeout))
	return wire.WriteFrame(conn, wire.Header{Kind: status, Seq: seq}, body)
}

func orNop(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}

func positive[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// longAgo is a deadline in the past: setting it interrupts blocked I/O.
var longAgo = time.Unix(1, 0)

// errDeadline is what I/O returns once a deadline has passed.
var errDeadline = os.ErrDeadlineExceeded
