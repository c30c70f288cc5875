//go:build mpi

package mpi

/*
#include "goddp_mpi.h"
*/
import "C"

import (
	"context"
	"fmt"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// MonitoredBarrier is c10d's monitored_barrier, on a duplicate of the
// group's communicator: every rank sends rank 0 a byte and waits for its
// release; rank 0 waits for every rank until timeout, then cancels the
// receives still open (MPI_Cancel) and fails with a *pg.MissingRanksError
// naming the ranks that did not arrive. Unlike a collective timeout, this
// does not abort the job.
func (g *Group) MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error {
	if err := backend.CheckContext(ctx); err != nil {
		return err
	}
	if timeout <= 0 {
		return fmt.Errorf("%w: monitored barrier timeout %v is not positive", pg.ErrInvalidArgument, timeout)
	}
	tag, err := g.nextMonitored()
	if err != nil || g.size == 1 {
		return err
	}
	deadline := time.Now().Add(timeout)
	step := func(send bool, peers []int) error {
		bufs := make([]cbuf, len(peers))
		for i := range bufs {
			bufs[i] = newCbuf(1)
		}
		o := &mpiWork{kind: pg.OpMonitoredBarrier, peer: pg.NoPeer, monitored: true, peers: peers, deadlineAt: deadline,
			start: func(o *mpiWork) error {
				for i, p := range peers {
					var req C.MPI_Request
					var rc C.int
					if send {
						rc = C.goddp_isend(bufs[i].p, 1, C.int(p), C.int(tag), g.monitor, &req)
					} else {
						rc = C.goddp_irecv(bufs[i].p, 1, C.int(p), C.int(tag), g.monitor, &req)
					}
					if err := o.post(rc, req); err != nil {
						return err
					}
				}
				return nil
			},
			miss: func(missing []int) error {
				if !waitAll && len(missing) > 1 {
					missing = missing[:1]
				}
				return &pg.MissingRanksError{Rank: g.rank, Missing: missing, Timeout: timeout.String()}
			},
			release: func() { freeAll(bufs) },
		}
		return g.submitMonitored(ctx, o).Wait(ctx)
	}
	if g.rank != 0 {
		if err := step(true, []int{0}); err != nil {
			return err
		}
		return step(false, []int{0})
	}
	others := make([]int, 0, g.size-1)
	for r := 1; r < g.size; r++ {
		others = append(others, r)
	}
	if err := step(false, others); err != nil {
		return err
	}
	return step(true, others)
}

// nextMonitored numbers a monitored barrier and returns its tag, or the
// group's state error once it is closed or aborted.
func (g *Group) nextMonitored() (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != nil {
		return 0, g.state
	}
	g.monSeq++
	return g.monSeq % (g.tagUB + 1), nil
}

// submitMonitored queues o without taking a sequence number.
func (g *Group) submitMonitored(ctx context.Context, o *mpiWork) pg.Work {
	o.g, o.ctx = g, ctx
	o.info = pg.WorkInfo{Op: o.kind, Rank: g.rank, Issued: time.Now()}
	o.fut = pg.NewFuture()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != nil {
		o.runRelease()
		return pg.Completed(g.state)
	}
	g.inflight[o] = struct{}{}
	if !g.e.post(func() { g.e.issue(o) }) {
		o.runRelease()
		return pg.Completed(fmt.Errorf("%w: MPI has been finalised in this process", pg.ErrClosed))
	}
	return o.fut
}
