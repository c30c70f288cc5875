package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
	"github.com/goddp/ddp/pg/store"
)

// Group is one rank of an NCCL process group. It implements pg.Extended.
// Its methods are safe for concurrent use; collectives must be issued in
// the same order on every rank.
type Group struct {
	opts       Options
	rank, size int
	log        *zap.Logger
	be         binding.Backend
	st         store.Store // for MonitoredBarrier; nil for subgroups made by Split
	storeKey   string

	mu       sync.Mutex // the issue lock: NCCL calls on one communicator are serialised
	seq      uint64     // the last collective's sequence number
	p2pSeq   map[p2pKey]uint64
	lanes    map[laneKey]*lane // point-to-point, made on first use
	pending  []*work           // issued, in stream order
	pool     pool
	failure  error // set once; later calls fail with it
	closed   bool
	mbRounds int // MonitoredBarrier calls so far

	dev        devState                        // device buckets: devbucket.go
	flight     atomic.Pointer[flight.Recorder] // put over this group by flight.Wrap (flight.go)
	lastFinish atomic.Int64                    // ns: when the watchdog last found an end event passed
	hooks      backend.Completions

	kick      chan struct{} // the watchdog has new Works (capacity 1)
	dead      chan struct{} // closed when the group fails or closes
	stop      chan struct{} // closed by Close
	exited    chan struct{} // closed when the watchdog returns
	closeOnce sync.Once
	closeErr  error
}

type p2pKey struct {
	op   pg.OpType
	peer int
}

var _ pg.Extended = (*Group)(nil)

// New joins the group: rank 0 makes an NCCL unique id and publishes it in
// st under opts.StoreKey, every rank reads it and creates its
// communicator on opts.Device, non-blocking where NCCL allows (2.14), so
// that ctx (or opts.Timeout when ctx has no deadline) can abort a stuck
// rendezvous.
func New(ctx context.Context, st store.Store, opts Options) (*Group, error) {
	opts, err := opts.withDefaults()
	if err == nil && (opts.Library == nil || opts.CUDA == nil) {
		err = errors.New("Options.Library and Options.CUDA are required (libnccl.Load, libnccl.LoadCUDA)")
	}
	if err != nil {
		return nil, &pg.CollectiveError{Op: "connect", Rank: opts.Rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument,
			Err: err}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	connErr := func(kind, err error) error {
		return &pg.CollectiveError{Op: "connect", Rank: opts.Rank, Peer: pg.NoPeer, Kind: kind, Err: err}
	}
	id, err := shareUniqueID(ctx, st, opts)
	if err != nil {
		return nil, connErr(kindOf(err), err)
	}
	dev, err := opts.CUDA.Device(opts.Device)
	if err != nil {
		return nil, connErr(pg.ErrInvalidArgument, fmt.Errorf("GPU %d: %w", opts.Device, err))
	}
	comm, err := opts.Library.CommInitRank(ctx, dev, opts.Size, id, opts.Rank)
	if err != nil {
		_ = dev.Close()
		return nil, connErr(kindOf(err), fmt.Errorf("ncclCommInitRank on GPU %d: %w", opts.Device, err))
	}
	be, err := newCUDABackend(comm)
	if err != nil {
		_ = comm.Abort()
		_ = dev.Close()
		return nil, connErr(pg.ErrComm, err)
	}
	be.ownDevice = true
	g := newGroup(be, opts, st)
	g.log.Debug("nccl process group ready", zap.Int("size", opts.Size), zap.Int("device", opts.Device),
		zap.Stringer("nccl", opts.Library.Version()), zap.Bool("nonblocking", comm.NonBlocking()))
	return g, nil
}

// shareUniqueID publishes rank 0's id and returns it on every rank.
func shareUniqueID(ctx context.Context, st store.Store, opts Options) (libnccl.UniqueID, error) {
	var id libnccl.UniqueID
	if opts.Rank == 0 {
		var err error
		if id, err = opts.Library.UniqueID(); err != nil {
			return id, err
		}
		return id, st.Set(ctx, opts.StoreKey, id[:])
	}
	b, err := st.Get(ctx, opts.StoreKey)
	if err != nil {
		return id, fmt.Errorf("waiting for rank 0's NCCL unique id: %w", err)
	}
	if len(b) != len(id) {
		return id, fmt.Errorf("store key %q holds %d bytes, want an NCCL unique id of %d", opts.StoreKey, len(b), len(id))
	}
	copy(id[:], b)
	return id, nil
}

// NewOnBackend makes one rank of a Group that runs on be rather than on a
// loaded library: the seam through which package nccltest runs Groups on
// the binding's test double. be's type is internal to pg/nccl, so only
// nccltest can supply one. The ranks' backends must already be connected
// (no unique id is exchanged); st serves MonitoredBarrier and the
// point-to-point lanes' rendezvous and may be shared by the ranks.
func NewOnBackend(be binding.Backend, st store.Store, opts Options) (*Group, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, &pg.CollectiveError{Op: "connect", Rank: opts.Rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument,
			Err: err}
	}
	return newGroup(be, opts, st), nil
}

// newGroup starts the watchdog of a group over be.
func newGroup(be binding.Backend, opts Options, st store.Store) *Group {
	g := &Group{
		opts: opts, rank: opts.Rank, size: opts.Size, be: be, st: st, storeKey: opts.StoreKey,
		log:    opts.Logger.With(zap.Int("rank", opts.Rank), zap.String("backend", "nccl")),
		p2pSeq: map[p2pKey]uint64{},
		lanes:  map[laneKey]*lane{},
		dead:   make(chan struct{}),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	g.pool.be = be
	go g.watchdog()
	return g
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.size }

// Backend returns "nccl".
func (g *Group) Backend() string { return "nccl" }

// OnCompletion registers a completion hook (pg.CompletionHooker).
func (g *Group) OnCompletion(hook func(pg.WorkInfo)) { g.hooks.Register(hook) }

// Abort aborts the communicator (ncclCommAbort) and fails every pending
// and future collective with pg.ErrAborted wrapping cause.
func (g *Group) Abort(cause error) {
	if cause == nil {
		cause = errors.New("Abort was called")
	}
	g.fail(pg.ErrAborted, cause, nil)
}

// Close fails pending collectives with pg.ErrClosed (aborting the
// communicator if there are any), otherwise destroys it gracefully
// (ncclCommFinalize, bounded), then destroys the stream, frees the
// staging memory and stops the watchdog. It is idempotent.
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		g.fail(pg.ErrClosed, errors.New("Close was called"), nil)
		close(g.stop)
		<-g.exited
		g.mu.Lock()
		lanes := make([]*lane, 0, len(g.lanes))
		for _, l := range g.lanes {
			lanes = append(lanes, l)
		}
		g.mu.Unlock()
		closeCtx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		for _, l := range lanes {
			<-l.done
			if l.be != nil {
				if err := l.be.Close(closeCtx); err != nil && g.closeErr == nil {
					g.closeErr = fmt.Errorf("closing the point-to-point communicator with rank %d: %w", l.key.peer, err)
				}
			}
		}
		if err := g.releaseDevice(closeCtx); err != nil && g.closeErr == nil {
			g.closeErr = fmt.Errorf("releasing device buckets: %w", err)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if err := g.be.Close(closeCtx); err != nil {
			g.closeErr = err
		}
		if g.closeErr == nil {
			g.pool.release()
		} else {
			g.log.Warn("nccl: closing the communicator failed; its staging memory is left allocated", zap.Error(g.closeErr))
		}
		g.hooks.Close()
	})
	return g.closeErr
}

// fail records the group's failure (the first wins), aborts the
// communicator and fails every pending Work with kind, naming each Work's
// collective and sequence number. culprit, if any, is the Work that
// caused it (a timeout); the flight recorder is logged (and dumped with
// Options.FlightDumpDir) for timeouts, once every pending Work has failed.
func (g *Group) fail(kind, cause error, culprit *work) {
	g.mu.Lock()
	if g.failure != nil {
		g.mu.Unlock()
		return
	}
	g.failure = &pg.CollectiveError{Op: "group", Rank: g.rank, Peer: pg.NoPeer, Kind: kind, Err: cause}
	pending := g.pending
	g.pending = nil
	var head *work // the collective the stream is in: it has started
	if len(pending) > 0 && pending[0].ev != nil {
		head = pending[0]
	}
	close(g.dead)
	var laneBackends []binding.Backend
	for _, l := range g.lanes {
		for _, op := range l.ops {
			pending = append(pending, op.w)
		}
		l.ops = nil
		if l.be != nil {
			laneBackends = append(laneBackends, l.be)
		}
	}
	g.mu.Unlock()
	if kind != pg.ErrClosed || len(pending) > 0 {
		if err := g.be.Abort(); err != nil {
			g.log.Warn("nccl: ncclCommAbort failed", zap.Error(err))
		}
		for _, be := range laneBackends {
			if err := be.Abort(); err != nil {
				g.log.Warn("nccl: ncclCommAbort of a point-to-point communicator failed", zap.Error(err))
			}
		}
	}
	if g.st != nil { // a receiver waiting for this rank's first send gives up at once
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := g.st.Set(ctx, goneKey(g.storeKey, g.rank), []byte(kindName(kind))); err != nil {
			g.log.Debug("nccl: could not publish this rank's departure", zap.Error(err))
		}
		cancel()
	}
	if kind != pg.ErrClosed {
		g.log.Warn("nccl process group failed", zap.Error(g.failure), zap.Int("pending", len(pending)))
	}
	now := time.Now()
	for _, w := range pending {
		err := cause
		if culprit != nil && w != culprit {
			err = fmt.Errorf("after %v seq %d failed: %w", culprit.op, culprit.seq, cause)
		}
		var started time.Time // Note [watchdog times]: only the head had started
		if w == head {
			started = time.Unix(0, g.lastFinish.Load())
		}
		w.finish(g, &pg.CollectiveError{Op: w.op.String(), Rank: g.rank, Peer: w.peer,
			Kind: kind, Err: fmt.Errorf("seq %d: %w", w.seq, err)}, now, started)
		// The stream may still touch this Work's staging buffers: they are
		// not reused (w.finish left them out of the pool).
	}
	if kind == pg.ErrTimeout {
		g.dumpFlight(culprit)
	}
}

// kindName names a failure kind for the departure key.
func kindName(kind error) string {
	switch kind {
	case pg.ErrClosed:
		return "closed"
	case pg.ErrAborted:
		return "aborted"
	case pg.ErrTimeout:
		return "timed out"
	}
	return "failed: " + kind.Error()
}

// failed returns the error new calls fail with, or nil.
func (g *Group) failedLocked() error {
	if g.failure != nil {
		return g.failure
	}
	if g.closed {
		return &pg.CollectiveError{Op: "group", Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrClosed,
			Err: errors.New("Close was called")}
	}
	return nil
}

// kindOf maps an NCCL or CUDA error to the pg sentinel it means.
func kindOf(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, pg.ErrTimeout), errors.Is(err, libnccl.Timeout):
		return pg.ErrTimeout
	case errors.Is(err, context.Canceled):
		return pg.ErrAborted
	case errors.Is(err, libnccl.RemoteError):
		return pg.ErrRemote
	case errors.Is(err, libnccl.InvalidArgument), errors.Is(err, libnccl.InvalidUsage),
		errors.Is(err, libnccl.ErrUnsupported):
		return pg.ErrInvalidArgument
	}
	return pg.ErrComm
}
