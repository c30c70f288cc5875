//go:build mpi

package mpi

/*
#include "goddp_mpi.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Options configure New.
type Options struct {
	// Timeout is the group timeout (pg.DefaultTimeout when zero). A Work
	// still running after it fails with pg.ErrTimeout and the job is
	// aborted (see the package documentation).
	Timeout time.Duration
	// AbortGrace is how long after a timeout MPI_Abort is called, so
	// that the caller can see and log the error (1s when zero).
	AbortGrace time.Duration
	// Logger receives the group's events; nil means none.
	Logger *zap.Logger
}

// Group is one rank of an MPI process group. It implements pg.Extended.
// Its methods are safe for concurrent use; collectives must be issued in
// the same order on every rank.
type Group struct {
	opts       Options
	e          *engine
	comm       C.MPI_Comm // owned by the engine thread
	monitor    C.MPI_Comm // a duplicate for MonitoredBarrier
	world      bool
	rank, size int
	tagUB      int
	log        *zap.Logger
	hooks      backend.Completions

	mu       sync.Mutex // the issue lock
	seq      uint64
	p2pSeq   map[p2pKey]uint64
	monSeq   int
	state    error // ErrAborted or ErrClosed once the group is no longer usable
	closed   bool
	inflight map[*mpiWork]struct{}
}

type p2pKey struct {
	peer int
	send bool
}

var _ pg.Extended = (*Group)(nil)

// New initialises MPI (MPI_Init_thread with MPI_THREAD_FUNNELED) and
// returns this process's rank of MPI_COMM_WORLD. Rank and size come from
// MPI (mpirun, srun --mpi=pmix): no store and no environment are read.
// MPI can be initialised once per process: a second New fails; make
// subgroups with NewGroup and Split. Close the group (and its subgroups)
// to finalise MPI.
func New(ctx context.Context, opts Options) (*Group, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = pg.DefaultTimeout
	}
	if opts.AbortGrace <= 0 {
		opts.AbortGrace = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: mpi.New: %w", pg.ErrTimeout, context.Cause(ctx))
	}
	e, rank, size, err := startEngine(opts.Logger, opts.AbortGrace)
	if err != nil {
		return nil, fmt.Errorf("mpi.New: %w", err)
	}
	g := newGroup(e, opts, rank, size)
	g.world = true
	g.comm = C.goddp_world()
	var rc C.int
	e.call(func() {
		g.comm = C.goddp_world()
		rc = C.goddp_dup(g.comm, &g.monitor)
		g.tagUB = int(C.goddp_tag_ub(g.comm))
	})
	if rc != C.MPI_SUCCESS {
		g.Close()
		return nil, fmt.Errorf("mpi.New: MPI_Comm_dup: %w", mpiError(rc))
	}
	g.log.Debug("MPI process group ready", zap.String("library", LibraryVersion(g)))
	return g, nil
}

func newGroup(e *engine, opts Options, rank, size int) *Group {
	return &Group{opts: opts, e: e, rank: rank, size: size, tagUB: 32767,
		comm: C.goddp_comm_null(), monitor: C.goddp_comm_null(),
		log:    opts.Logger.With(zap.String("backend", "mpi"), zap.Int("rank", rank)),
		p2pSeq: map[p2pKey]uint64{}, inflight: map[*mpiWork]struct{}{}}
}

// LibraryVersion is MPI_Get_library_version's first line.
func LibraryVersion(g *Group) string {
	var v string
	g.e.call(func() { v = libraryVersion() })
	return v
}

// Rank is this process's rank in the group.
func (g *Group) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.size }

// Backend is "mpi".
func (g *Group) Backend() string { return "mpi" }

// OnCompletion registers a hook called with every finished Work.
func (g *Group) OnCompletion(hook func(pg.WorkInfo)) { g.hooks.Register(hook) }

// failure is the group's state error, or the engine's after a timeout.
func (g *Group) failure() error {
	g.mu.Lock()
	st := g.state
	g.mu.Unlock()
	if st != nil {
		return st
	}
	g.e.mu.Lock()
	dead := g.e.dead
	g.e.mu.Unlock()
	return dead
}

func (g *Group) opErr(o *mpiWork, kind, err error) error {
	return &pg.CollectiveError{Op: o.kind.String(), Rank: g.rank, Peer: o.peer, Kind: kind, Err: err}
}

// complete finishes o's Future once and reports it to the hooks.
func (g *Group) complete(o *mpiWork, err error) {
	if o.done {
		return
	}
	o.done = true
	g.mu.Lock()
	delete(g.inflight, o)
	g.mu.Unlock()
	o.fut.Complete(err)
	if g.hooks.Active() {
		info := o.info
		info.Finished = time.Now()
		if info.Started.IsZero() {
			info.Started = info.Finished
		}
		info.Err = err
		g.hooks.Deliver(info)
	}
}

// submit numbers o (a collective when p2p is nil), and queues it on the
// engine. It returns o's Work. A nil ctx is refused before anything is
// numbered.
func (g *Group) submit(ctx context.Context, o *mpiWork, dtype pg.Dtype, inBytes, outBytes int, p2p *p2pKey) pg.Work {
	o.g = g
	o.ctx = ctx
	if p2p == nil {
		o.peer = pg.NoPeer
	}
	o.info = pg.WorkInfo{Op: o.kind, Rank: g.rank, Dtype: dtype, InBytes: int64(inBytes), OutBytes: int64(outBytes),
		Issued: time.Now()}
	if err := backend.CheckContext(ctx); err != nil {
		o.runRelease()
		return pg.Completed(g.opErr(o, pg.ErrInvalidArgument, err))
	}
	posted, err := g.enqueue(o, p2p)
	if err != nil {
		o.runRelease()
		return pg.Completed(err)
	}
	if !posted {
		g.complete(o, g.opErr(o, pg.ErrClosed, errors.New("MPI has been finalised in this process")))
		o.runRelease()
	}
	return o.fut
}

// enqueue numbers o and posts it to the engine, or returns the group's
// state error. posted is false when the engine has stopped.
func (g *Group) enqueue(o *mpiWork, p2p *p2pKey) (posted bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != nil {
		return false, g.state
	}
	if p2p != nil {
		g.p2pSeq[*p2p]++
		o.seq = g.p2pSeq[*p2p]
	} else {
		g.seq++
		o.seq = g.seq
	}
	o.info.Seq = o.seq
	o.fut = pg.NewSeqFuture(o.seq)
	g.inflight[o] = struct{}{}
	return g.e.post(func() { g.e.issue(o) }), nil
}

// stop fails every Work in flight with err and refuses later ones. The
// MPI requests are abandoned to the engine, which frees their buffers if
// they ever finish (MPI cannot cancel a collective).
func (g *Group) stop(kind error, cause error) {
	g.mu.Lock()
	if g.state == nil {
		if cause != nil {
			g.state = fmt.Errorf("%w: %w", kind, cause)
		} else {
			g.state = kind
		}
	}
	st := g.state
	ops := make([]*mpiWork, 0, len(g.inflight))
	for o := range g.inflight {
		ops = append(ops, o)
	}
	g.mu.Unlock()
	g.e.call(func() {
		for _, o := range ops {
			g.complete(o, g.opErr(o, kind, st))
		}
	})
}

// Abort fails every pending and future Work with pg.ErrAborted. The
// other ranks' collectives with this one then time out, and the first to
// do so calls MPI_Abort.
func (g *Group) Abort(cause error) { g.stop(pg.ErrAborted, cause) }

// Close fails pending Works with pg.ErrClosed, frees the communicator
// and, when the last group of the process closes, finalises MPI (which
// waits for the other processes to finalise too). Close is idempotent.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	g.stop(pg.ErrClosed, nil)
	g.e.call(func() {
		busy := false
		for _, o := range g.e.pending {
			if o.g == g && len(o.reqs) > 0 {
				busy = true
			}
		}
		if busy {
			return // requests still use the communicators; leave them
		}
		if g.monitor != C.goddp_comm_null() {
			C.goddp_comm_free(&g.monitor)
		}
		if !g.world && g.comm != C.goddp_comm_null() {
			C.goddp_comm_free(&g.comm)
		}
	})
	g.hooks.Close()
	return g.e.unref(g.opts.Timeout)
}
