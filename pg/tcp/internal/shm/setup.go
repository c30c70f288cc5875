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
	// ArenaBytes sizes this rank's arena, the part of its segment from
	// which Alloc hands out buffers its peers read in place (Note
	// [buffers peers read in place]): 0 is DefaultArenaBytes, negative is
	// none. It is virtual size: a page costs memory once a buffer
	// touches it.
	ArenaBytes int
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

// arenaBytes is the arena's size in bytes: ArenaBytes rounded up to
// whole pages, DefaultArenaBytes for 0, none for negative.
func (c Config) arenaBytes() int {
	switch {
	case c.ArenaBytes < 0:
		return 0
	case c.ArenaBytes == 0:
		return DefaultArenaBytes
	}
	return min((c.ArenaBytes+arenaAlign-1)&^(arenaAlign-1), MaxArenaBytes)
}
