//go:build mpi

package mpi

/*
#include "goddp_mpi.h"
*/
import "C"

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// checkTag refuses tags above the communicator's MPI_TAG_UB.
func (g *Group) checkTag(what string, tag int) error {
	if tag > g.tagUB {
		return fmt.Errorf("%w: %s tag %d exceeds this MPI's MPI_TAG_UB %d", pg.ErrInvalidArgument, what, tag, g.tagUB)
	}
	return nil
}

// Send is MPI_Isend of t's bytes with tag. MPI's non-overtaking rule
// keeps messages with the same tag between two ranks in order.
func (g *Group) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	if err := backend.CheckPeer("send", t, dst, tag, g.rank, g.size); err != nil {
		return pg.Completed(err)
	}
	if err := g.checkTag("send", tag); err != nil {
		return pg.Completed(err)
	}
	if err := checkCount(len(t.Data)); err != nil {
		return pg.Completed(err)
	}
	b := moveIn(t)
	o := &mpiWork{kind: pg.OpSend, peer: dst,
		start: func(o *mpiWork) error {
			var req C.MPI_Request
			return o.post(C.goddp_isend(b.p, C.int(len(t.Data)), C.int(dst), C.int(tag), g.comm, &req), req)
		},
		release: b.free,
	}
	o.peer = dst
	return g.submit(ctx, o, t.Dtype, len(t.Data), 0, &p2pKey{peer: dst, send: true})
}

// Recv is MPI_Irecv into t. A message longer than t fails with
// pg.ErrInvalidArgument (MPI_ERR_TRUNCATE); a shorter one too.
func (g *Group) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	if err := backend.CheckPeer("recv", t, src, tag, g.rank, g.size); err != nil {
		return pg.Completed(err)
	}
	if err := g.checkTag("recv", tag); err != nil {
		return pg.Completed(err)
	}
	if err := checkCount(len(t.Data)); err != nil {
		return pg.Completed(err)
	}
	b := newCbuf(len(t.Data))
	o := &mpiWork{kind: pg.OpRecv, peer: src,
		start: func(o *mpiWork) error {
			var req C.MPI_Request
			return o.post(C.goddp_irecv(b.p, C.int(len(t.Data)), C.int(src), C.int(tag), g.comm, &req), req)
		},
		finish: func(o *mpiWork) error {
			if got := o.counts[0]; got != len(t.Data) {
				return g.opErr(o, pg.ErrInvalidArgument,
					fmt.Errorf("received %d bytes from rank %d into a %d-byte tensor; sender and receiver must agree on sizes", got,
						src, len(t.Data)))
			}
			copy(t.Data, b.bytes())
			return nil
		},
		release: b.free,
	}
	return g.submit(ctx, o, t.Dtype, 0, len(t.Data), &p2pKey{peer: src})
}
