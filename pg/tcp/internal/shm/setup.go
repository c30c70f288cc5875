package shm

import (
	"time"

	"go.uber.org/zap"
)

// Config configures Setup.
type Config struct {
	Rank, Size int
	// Off, when not nil, switches shared memory off and says why (it is
	// logged). The rank still takes part in the agreement, so that its
	// peers know it shares memory with no one.
	Off error
	// HostLabel, for tests and benchmarks only, splits this host into
	// several: ranks share memory only with ranks of the same label.
	HostLabel string
	// Secret is the job's shared secret, which a peer must prove it
	// holds before it receives this rank's segment; Hello is what this
	// rank says, in the same handshake, when it asks for a peer's.
	Secret, Hello []byte
	// HandshakeTimeout bounds each handshake.
	HandshakeTimeout time.Duration
	// Logger receives the transports chosen and any connection refused;
	// it must not be nil.
	Logger *zap.Logger
}

// StoreError is a failure of Setup to write or read the store. Peer is
// the rank whose key it read, or pg.NoPeer for this rank's own.
type StoreError struct {
	Peer int
	Err  error
}

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }
