package tcp

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// Defaults of the tuning knobs in Options.
const (
	// DefaultRingThreshold is the AllReduce size, in bytes, from which the
	// ring is used; smaller tensors use recursive doubling.
	DefaultRingThreshold = 256 << 10
	// DefaultChunkBytes is the largest frame payload a collective sends:
	// the unit the ring pipelines (smaller segments are cut into smaller
	// chunks, so that a segment has a few). On loopback, 2 MiB frames cost
	// the kernel less per byte than 512 KiB ones.
	DefaultChunkBytes = 2 << 20
	// DefaultMaxFrame caps the payload of a frame a peer may send.
	DefaultMaxFrame = wire.DefaultMaxPayload
	// handshakeTimeout bounds one connection's authentication.
	handshakeTimeout = 10 * time.Second
	// closeGrace bounds how long a link may take to send its last frame
	// (goodbye or abort) before its socket is closed.
	closeGrace = time.Second
)

// Options configure a Group. Rank, Size, Secret and ListenAddr are
// required; everything else has a default.
type Options struct {
	// Rank is this process's rank in [0, Size).
	Rank int
	// Size is the number of ranks, at most pg.MaxWorldSize.
	Size int
	// Secret is the job's shared secret, at least 16 bytes. Every
	// connection, in both directions, proves it holds it.
	Secret []byte
	// ListenAddr is the address to listen on, always explicit:
	// "127.0.0.1:0" for a free loopback port (single-machine jobs), or
	// "10.0.0.5:0", ":29600" for a job spanning machines.
	ListenAddr string
	// AdvertiseAddr is the address peers dial, published in the store.
	// Empty means the listener's own address, which must then not be
	// the unspecified address (0.0.0.0 or ::).
	AdvertiseAddr string
	// Timeout is the group timeout: a collective that has not finished
	// this long after it was issued fails with pg.ErrTimeout. It also
	// bounds New when ctx has no deadline. Zero means pg.DefaultTimeout.
	Timeout time.Duration
	// Logger receives connection refusals, lost peers and failures; nil
	// means no logging.
	Logger *zap.Logger

	// RingThreshold is the AllReduce size in bytes at and above which the
	// ring is used; below it, recursive doubling. Zero means
	// DefaultRingThreshold.
	RingThreshold int
	// ChunkBytes is the largest payload of one frame, and the ring's
	// pipeline unit. Zero means DefaultChunkBytes.
	ChunkBytes int
	// MaxFrame caps the payload of a frame accepted from a peer; larger
	// ones are a protocol error. Zero means DefaultMaxFrame. It must be
	// at least ChunkBytes.
	MaxFrame int
	// LinkBytesPerSec, if positive, limits what each connection sends per
	// second, to emulate a slow network. Zero means unlimited.
	LinkBytesPerSec int64
	// SocketBuffer, if positive, is the kernel send and receive buffer
	// size to ask for (capped by net.core.[rw]mem_max). Zero leaves the
	// kernel's autotuning, which grows the buffers to tcp_rmem/tcp_wmem's
	// maximum (several MiB) as the connection needs, and measured no
	// slower on loopback.
	SocketBuffer int
	// NoSharedMemory turns the shared-memory transport off for this
	// rank: by default, the ranks of the group that share a host (and its
	// network namespace) move AllReduce's data between them through
	// shared memory, and the TCP connections carry only control frames,
	// the other collectives and, in a group spanning hosts, the traffic
	// between hosts. A positive LinkBytesPerSec, which emulates a
	// network, turns it off too. See doc.go.
	NoSharedMemory bool
	// SharedArenaBytes sizes the part of this rank's shared-memory
	// segment from which NewHostBuffer hands out buffers (the reducer
	// keeps its gradient buckets there), which the ranks of its host read
	// in place in an AllReduce instead of copying them through the
	// segment's slots. 0 means 1 GiB; negative, none. It is virtual size:
	// memory is used only as buffers touch it.
	SharedArenaBytes int

	// hostLabel, for tests and benchmarks only, splits this host into
	// simulated hosts: ranks with different labels never share memory,
	// as if on different machines. Empty (always, outside this package's
	// tests) means the host is its boot id alone.
	hostLabel string

	// advertiseHost, set for subgroups, is the host to advertise with
	// the listener's port, when AdvertiseAddr is empty.
	advertiseHost string
}

// withDefaults validates o and fills in its defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Size < 1 || o.Rank < 0 || o.Rank >= o.Size {
		return o, fmt.Errorf("%w: rank %d is not a rank of a group of size %d", pg.ErrInvalidArgument, o.Rank, o.Size)
	}
	if o.Size > pg.MaxWorldSize {
		return o, fmt.Errorf("%w: a group of size %d is larger than pg.MaxWorldSize, %d", pg.ErrInvalidArgument, o.Size,
			pg.MaxWorldSize)
	}
	if len(o.Secret) < wire.MinSecret {
		return o, fmt.Errorf("%w: %w", pg.ErrInvalidArgument, wire.ErrNoSecret)
	}
	if o.ListenAddr == "" {
		return o, fmt.Errorf("%w: ListenAddr is required (e.g. \"127.0.0.1:0\" for a single-machine job)",
			pg.ErrInvalidArgument)
	}
	if o.Timeout <= 0 {
		o.Timeout = pg.DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.RingThreshold <= 0 {
		o.RingThreshold = DefaultRingThreshold
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	if o.MaxFrame > math.MaxUint32 {
		o.MaxFrame = math.MaxUint32
	}
	if o.ChunkBytes > o.MaxFrame {
		return o, fmt.Errorf("%w: ChunkBytes %d exceeds MaxFrame %d", pg.ErrInvalidArgument, o.ChunkBytes, o.MaxFrame)
	}
	return o, nil
}

// advertise returns the address to publish for listener address a.
func (o Options) advertise(a net.Addr) (string, error) {
	if o.AdvertiseAddr != "" {
		return o.AdvertiseAddr, nil
	}
	if ta, ok := a.(*net.TCPAddr); ok && o.advertiseHost != "" {
		return net.JoinHostPort(o.advertiseHost, strconv.Itoa(ta.Port)), nil
	}
	if ta, ok := a.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		return "", fmt.Errorf("%w: listening on %v, every interface: set AdvertiseAddr to the address peers should dial",
			pg.ErrInvalidArgument, a)
	}
	return a.String(), nil
}
