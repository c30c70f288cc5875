package store

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
)

// TCPStoreOptions configure NewTCPStore.
type TCPStoreOptions struct {
	// Addr is the server's host:port, as every rank dials it (MASTER_ADDR
	// and MASTER_PORT). With IsServer and no ListenAddr, it is also the
	// address the server listens on.
	Addr string
	// ListenAddr, if set, is where the server listens instead of Addr:
	// ":29500" to listen on every interface when Addr names a host
	// that is not a local address (a Kubernetes service, say).
	ListenAddr string
	// IsServer makes this process host the server, like c10d's is_master:
	// rank 0 sets it.
	IsServer bool
	// Secret is the job's shared secret, at least 16 bytes.
	Secret []byte
	// Timeout bounds calls whose ctx has no deadline, and the wait for the
	// server to come up; zero means DefaultTimeout.
	Timeout time.Duration
	// Logger receives the server's refusals and the client's retries; nil
	// means none.
	Logger *zap.Logger
	// MaxConns caps the server's connections; zero means DefaultMaxConns.
	MaxConns int
	// HandshakeTimeout bounds the server's wait for a new connection to
	// authenticate; zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxInflight is the server's budget for the request frames it reads
	// at once; zero means DefaultMaxInflight.
	MaxInflight int64
}

// TCPStore is a Client that may also own the Server it talks to, so that
// rank 0 can both host the store and use it, as c10d's TCPStore does.
type TCPStore struct {
	*Client
	server *Server
}

var _ Store = (*TCPStore)(nil)

// NewTCPStore starts the server when opts.IsServer is set, then connects a
// client to it, waiting for the server as Dial does.
func NewTCPStore(ctx context.Context, opts TCPStoreOptions) (*TCPStore, error) {
	s := &TCPStore{}
	addr := opts.Addr
	if opts.IsServer {
		listen := opts.ListenAddr
		if listen == "" {
			listen = opts.Addr
		}
		srv, err := NewServer(ctx,
			ServerOptions{Addr: listen, Secret: opts.Secret, Logger: opts.Logger, MaxConns: opts.MaxConns,
				HandshakeTimeout: opts.HandshakeTimeout, MaxInflight: opts.MaxInflight})
		if err != nil {
			return nil, err
		}
		s.server, addr = srv, srv.Addr()
	}
	c, err := Dial(ctx, addr, ClientOptions{Secret: opts.Secret, Timeout: opts.Timeout, Logger: opts.Logger})
	if err != nil {
		if s.server != nil {
			s.server.Close()
		}
		return nil, err
	}
	s.Client = c
	return s, nil
}

// Server returns the server this store hosts, or nil.
func (s *TCPStore) Server() *Server { return s.server }

// Close closes the client and, if this store hosts it, the server, which
// ends every other rank's connection too: rank 0 should close last.
func (s *TCPStore) Close() error {
	err := s.Client.Close()
	if s.server != nil {
		err = errors.Join(err, s.server.Close())
	}
	return err
}
