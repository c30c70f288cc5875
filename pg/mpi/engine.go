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
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
)

// abortCode is the error code of the MPI_Abort that follows a timeout;
// mpirun exits with it.
const abortCode = 124

// engine owns MPI in this process: one goroutine, locked to its OS
// thread, initialises MPI (MPI_THREAD_FUNNELED), makes every MPI call,
// polls the requests in flight with MPI_Test and finalises MPI when the
// last group using it is closed.
type engine struct {
	log   *zap.Logger
	grace time.Duration

	mu       sync.Mutex
	queue    []func() // run on the engine thread, in order
	refs     int      // open groups
	stopping bool
	dead     error // set once MPI_Abort is scheduled or MPI is finalised
	kick     chan struct{}
	exited   chan struct{}

	// owned by the engine goroutine
	pending      []*mpiWork
	lastProgress time.Time // when a request last finished or a Work was issued
	abortAt      time.Time
	abortOn      C.MPI_Comm
}

// mpiWork is one Work in flight: its MPI requests and what to do when they end.
type mpiWork struct {
	g        *Group
	kind     pg.OpType
	seq      uint64
	peer     int
	fut      *pg.Future
	info     pg.WorkInfo
	ctx      context.Context
	deadline time.Time

	start   func(o *mpiWork) error // engine thread: posts the requests
	reqs    []C.MPI_Request        // in flight
	counts  []int                  // bytes received, per request
	finish  func(o *mpiWork) error // engine thread, after success: copies out
	release func()                 // frees the C memory; called once the requests are over
	pinner  *runtime.Pinner        // the tensors MPI uses in place, if any
	done    bool                   // the Future is completed (the requests may still run)

	// monitored marks a MonitoredBarrier step: at its deadline the
	// requests still open are cancelled and miss(peers) is its error,
	// instead of the job being aborted.
	monitored  bool
	peers      []int // the peer of each request
	deadlineAt time.Time
	miss       func(missing []int) error
}

func startEngine(log *zap.Logger, grace time.Duration) (*engine, int, int, error) {
	e := &engine{log: log, grace: grace, kick: make(chan struct{}, 1), exited: make(chan struct{}), refs: 1}
	type hello struct {
		rank, size int
		err        error
	}
	ready := make(chan hello, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: MPI's thread dies with the goroutine
		defer close(e.exited)
		var provided C.int
		switch rc := C.goddp_init(&provided); rc {
		case 0:
		case -1:
			ready <- hello{err: errors.New(
				"MPI is already initialised in this process; use the existing group's NewGroup or Split")}
			return
		case -2:
			ready <- hello{err: errors.New(
				"MPI was finalised in this process (a world group was closed); MPI cannot be initialised twice")}
			return
		default:
			ready <- hello{err: fmt.Errorf("MPI_Init_thread: %w", mpiError(rc))}
			return
		}
		if provided < C.goddp_thread_funneled() {
			log.Warn("MPI provides less than MPI_THREAD_FUNNELED; goddp calls MPI from one thread only, which is what "+
				"FUNNELED needs", zap.Int("provided", int(provided)))
		}
		w := C.goddp_world()
		ready <- hello{rank: int(C.goddp_rank(w)), size: int(C.goddp_size(w))}
		e.loop()
	}()
	h := <-ready
	if h.err != nil {
		<-e.exited
		return nil, 0, 0, h.err
	}
	return e, h.rank, h.size, nil
}

// post queues f to run on the engine thread. It reports false when the
// engine has stopped.
func (e *engine) post(f func()) bool {
	e.mu.Lock()
	if e.stopping {
		e.mu.Unlock()
		return false
	}
	e.queue = append(e.queue, f)
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
	return true
}

// call runs f on the engine thread and waits for it.
func (e *engine) call(f func()) error {
	done := make(chan struct{})
	if !e.post(func() { f(); close(done) }) {
		return errors.New("the MPI engine of this process has stopped")
	}
	<-done
	return nil
}

// ref adds a group to the engine; unref removes one and stops the engine
// (finalising MPI) after the last.
func (e *engine) ref() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return false
	}
	e.refs++
	return true
}

func (e *engine) unref(timeout time.Duration) error {
	e.mu.Lock()
	e.refs--
	last := e.refs == 0
	if last {
		e.stopping = true
	}
	e.mu.Unlock()
	if !last {
		return nil
	}
	select {
	case e.kick <- struct{}{}:
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.exited:
		return nil
	case <-t.C:
		return fmt.Errorf("%w: MPI_Finalize did not return within %v; the other ranks have not closed their groups",
			pg.ErrTimeout, timeout)
	}
}

func (e *engine) loop() {
	idle := 0
	timer := time.NewTimer(time.Hour)
	for {
		e.mu.Lock()
		q := e.queue
		e.queue = nil
		stop := e.stopping
		e.mu.Unlock()
		for _, f := range q {
			f()
		}
		progressed := len(q) > 0
		if e.progress() {
			progressed = true
		}
		if !e.abortAt.IsZero() && time.Now().After(e.abortAt) {
			e.log.Error("calling MPI_Abort after a collective timed out; mpirun ends every rank of the job")
			C.goddp_abort(e.abortOn, abortCode)
			// MPI_Abort does not return in Open MPI; if it does, stop.
			e.abortAt = time.Time{}
		}
		if stop && len(q) == 0 {
			e.finalize()
			return
		}
		if progressed {
			idle = 0
			e.lastProgress = time.Now()
			continue
		}
		if len(e.pending) == 0 && e.abortAt.IsZero() {
			<-e.kick
			e.lastProgress = time.Now()
			continue
		}
		// MPI moves data only inside MPI calls (Open MPI's non-blocking
		// collectives advance a round per MPI_Test), so the requests are
		// polled without pause while they are young: Gosched, then
		// sched_yield so that other ranks sharing the core run. Requests
		// idle for more than 50ms (a peer that has not arrived) are polled
		// every 200µs, not to burn a core for a late rank.
		idle++
		switch {
		case idle < 64:
			runtime.Gosched()
			continue
		case time.Since(e.lastProgress) < 50*time.Millisecond:
			C.goddp_yield()
			continue
		}
		timer.Reset(200 * time.Microsecond)
		select {
		case <-e.kick:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

func (e *engine) finalize() {
	e.mu.Lock()
	dead := e.dead
	e.mu.Unlock()
	live := 0
	for _, o := range e.pending {
		if len(o.reqs) > 0 {
			live++
		}
	}
	if live > 0 || dead != nil {
		// No MPI call follows, so nothing touches the abandoned buffers:
		// unpin the Go memory (a Pinner collected while pinning is a
		// fatal error) and leave the C memory to the process's exit.
		for _, o := range e.pending {
			if o.pinner != nil {
				o.pinner.Unpin()
			}
		}
		e.log.Warn("not calling MPI_Finalize: requests abandoned by an aborted or timed-out group are still in flight; "+
			"mpirun will end the job when this process exits", zap.Int("inflight", live))
		return
	}
	if rc := C.goddp_finalize(); rc != C.MPI_SUCCESS {
		e.log.Warn("MPI_Finalize failed", zap.Error(mpiError(rc)))
	}
}

// issue starts o on the engine thread.
func (e *engine) issue(o *mpiWork) {
	e.mu.Lock()
	dead := e.dead
	e.mu.Unlock()
	if dead != nil { // MPI_Abort is on its way: post nothing more
		o.g.complete(o, dead)
		o.runRelease()
		return
	}
	// A Work of an aborted or closed group was failed by stop already; it
	// is still posted, so that MPI's matching stays in step with the
	// ranks that issue their half, and its request runs to completion in
	// the background.
	o.info.Started = time.Now()
	o.deadline = o.info.Started.Add(o.g.opts.Timeout)
	if !o.deadlineAt.IsZero() {
		o.deadline = o.deadlineAt
	}
	if err := o.start(o); err != nil {
		// The requests posted before the failure are left to finish.
		o.g.complete(o, o.g.opErr(o, pg.ErrInvalidArgument, err))
		if len(o.reqs) == 0 {
			o.runRelease()
			return
		}
	}
	o.counts = make([]int, len(o.reqs))
	e.pending = append(e.pending, o)
}

func (o *mpiWork) runRelease() {
	if o.release != nil {
		o.release()
		o.release = nil
	}
}

// progress tests every request in flight and finishes the ops whose
// requests have all ended. It reports whether anything finished.
func (e *engine) progress() bool {
	any := false
	now := time.Now()
	kept := e.pending[:0]
	for _, o := range e.pending {
		var first error
		for i := range o.reqs {
			if o.reqs[i] == C.goddp_req_null() {
				continue
			}
			var done, count C.int
			rc := C.goddp_test(&o.reqs[i], &done, &count)
			if done != 0 {
				any = true
				o.reqs[i] = C.goddp_req_null()
				o.counts[i] = int(count)
				if rc != C.MPI_SUCCESS && first == nil {
					if rc == C.goddp_err_truncate() {
						first = o.g.opErr(o, pg.ErrInvalidArgument, fmt.Errorf("the message from rank %d is longer than the %d-byte "+
							"receive buffer; sender and receiver must agree on sizes", o.peer, o.info.OutBytes))
					} else {
						first = o.g.opErr(o, pg.ErrComm, mpiError(rc))
					}
				}
			}
		}
		if first != nil && !o.done {
			o.g.complete(o, first)
		}
		live := false
		for i := range o.reqs {
			if o.reqs[i] != C.goddp_req_null() {
				live = true
			}
		}
		if !live {
			o.reqs = nil
			if !o.done {
				var err error
				if o.finish != nil {
					err = o.finish(o)
				}
				o.g.complete(o, err)
			}
			o.runRelease()
			continue
		}
		if !o.done {
			var why error
			switch {
			case now.After(o.deadline):
				why = fmt.Errorf("collective #%d (%s) did not finish within the group timeout %v", o.seq, o.kind, o.g.opts.Timeout)
			case o.ctx.Err() != nil:
				why = fmt.Errorf("collective #%d (%s): context ended: %w", o.seq, o.kind, context.Cause(o.ctx))
			}
			if why != nil && o.monitored {
				var missing []int
				for i := range o.reqs {
					if o.reqs[i] != C.goddp_req_null() {
						C.goddp_cancel(&o.reqs[i])
						o.reqs[i] = C.goddp_req_null()
						missing = append(missing, o.peers[i])
					}
				}
				o.g.complete(o, o.miss(missing))
				o.runRelease()
				continue
			} else if why != nil {
				e.timedOut(o, why)
			}
		}
		kept = append(kept, o)
	}
	for i := len(kept); i < len(e.pending); i++ {
		e.pending[i] = nil
	}
	e.pending = kept
	return any
}

// timedOut fails o with pg.ErrTimeout, every other op in flight with
// pg.ErrAborted, and schedules MPI_Abort on o's communicator after the
// grace period, as c10d's ProcessGroupMPI does: MPI cannot cancel a
// collective, so the ranks can no longer agree on what comes next.
func (e *engine) timedOut(o *mpiWork, why error) {
	err := o.g.opErr(o, pg.ErrTimeout, fmt.Errorf("%w; MPI_Abort follows in %v", why, e.grace))
	e.log.Error("MPI collective timed out", zap.Error(err))
	o.g.complete(o, err)
	cause := fmt.Errorf("%w: %w", pg.ErrAborted, err)
	e.mu.Lock()
	if e.dead == nil {
		e.dead = cause
	}
	e.mu.Unlock()
	for _, p := range e.pending {
		if !p.done {
			p.g.complete(p, p.g.opErr(p, pg.ErrAborted, err))
		}
	}
	if e.abortAt.IsZero() {
		e.abortAt = time.Now().Add(e.grace)
		e.abortOn = o.g.comm
	}
}
