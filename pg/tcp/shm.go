package tcp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// The group's side of the shared-memory transport (pg/tcp/internal/shm):
// setting it up at New, and the checks its waits make. The collectives
// choose it (g.shm.Full()) in their own files; the hierarchical AllReduce
// is in shm_hier.go.

// setupShm sets up the shared-memory transport with the ranks on this
// rank's host (shm.Setup): a nil world when there are none or it is
// switched off, and the group's host layout when it spans hosts some of
// which hold several of its ranks.
func setupShm(ctx context.Context, st store.Store, o Options, log *zap.Logger) (*shm.World, *shm.Layout, error) {
	c := shm.Config{Rank: o.Rank, Size: o.Size, HostLabel: o.hostLabel, Secret: o.Secret,
		Hello: helloOf(o).encode(), HandshakeTimeout: handshakeTimeout, Logger: log, ArenaBytes: o.SharedArenaBytes}
	if o.NoSharedMemory || o.LinkBytesPerSec > 0 {
		c.Off = errors.New("shared memory switched off (Options.NoSharedMemory or LinkBytesPerSec)")
	}
	w, layout, err := shm.Setup(ctx, st, c)
	if se := (*shm.StoreError)(nil); errors.As(err, &se) {
		return nil, nil, connectErr(o, se.Peer, storeKind(se.Err), se.Err)
	}
	return w, layout, err
}

var _ shm.Run = (*run)(nil)

// Check is, for the shared-memory transport's waits, block's checks
// without waiting: the collective's error if it cannot go on.
func (r *run) Check(peer int) error {
	// The caller's ctx first: its end also aborts the group (executor.go),
	// and the caller must see its own cause, not the abort it triggered.
	select {
	case <-r.ctxDone:
		return r.g.ctxErr(r.op, r.ctx)
	default:
	}
	select {
	case <-r.timer.C:
		return r.errf(peer, pg.ErrTimeout,
			fmt.Errorf("collective #%d made no progress with rank %d over shared memory before its deadline (group timeout %v)",
				r.seq+1, peer, r.g.opts.Timeout))
	case <-r.ctxDone:
		return r.g.ctxErr(r.op, r.ctx)
	case <-r.g.failed:
		return r.g.failure.Load().errorFor(r.op, r.g.rank)
	default:
	}
	l := r.g.links[peer]
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return r.linkErr(l, err)
	}
	return nil
}

// Fail is the collective's error about peer, for the shared-memory
// transport.
func (r *run) Fail(peer int, kind, err error) error { return r.errf(peer, kind, err) }

var _ backend.HostBufferAllocator = (*Group)(nil)

// InPlaceAllReduces is how many AllReduces this rank ran in place through
// shared memory, reading and writing its peers' tensors where they lie
// because every rank's was a host buffer (NewHostBuffer). It is for
// diagnostics and tests.
func (g *Group) InPlaceAllReduces() int {
	if g.shm == nil {
		return 0
	}
	return g.shm.InPlaceRuns()
}

// NewHostBuffer implements backend.HostBufferAllocator: numel zeroed elements
// of d in this rank's shared-memory arena (Options.SharedArenaBytes),
// which the ranks of its host read in place when every rank's tensor of
// an AllReduce lies in its arena (Note [buffers peers read in place] in
// pg/tcp/internal/shm). It fails when the group does not run its
// collectives through shared memory alone (a rank alone on its host,
// ranks on several hosts, NoSharedMemory) or the arena is full. A buffer
// outlives the group's Close: the arena stays mapped while any is open.
func (g *Group) NewHostBuffer(d pg.Dtype, numel int) (backend.HostBuffer, error) {
	if g.shm == nil || !g.shm.Full() {
		return nil, fmt.Errorf("%w: pg/tcp: rank %d shares no memory with all its peers, so it has no host buffers",
			pg.ErrUnsupported, g.rank)
	}
	if numel <= 0 || d.Size() == 0 || numel > math.MaxInt/d.Size() {
		return nil, fmt.Errorf("%w: pg/tcp: a host buffer of %d elements of %v", pg.ErrInvalidArgument, numel, d)
	}
	b, off, err := g.shm.Alloc(numel * d.Size())
	if err != nil {
		return nil, err
	}
	return &hostBuffer{w: g.shm, t: pg.Tensor{Dtype: d, Data: b}, off: off}, nil
}

// hostBuffer is a buffer in this rank's arena.
type hostBuffer struct {
	w      *shm.World
	t      pg.Tensor
	off    int
	closed atomic.Bool
}

func (b *hostBuffer) Tensor() pg.Tensor { return b.t }

func (b *hostBuffer) Close() error {
	if b.closed.Swap(true) {
		return fmt.Errorf("%w: pg/tcp: host buffer closed twice", pg.ErrInvalidArgument)
	}
	return b.w.Free(b.off)
}
