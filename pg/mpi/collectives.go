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
	"math"
	"runtime"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// The MPI calls take int counts.
func checkCount(n int) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("%w: %d elements exceed MPI's int count; split the tensor", pg.ErrInvalidArgument, n)
	}
	return nil
}

// post records a request, or turns a failed call into an error.
func (o *mpiWork) post(rc C.int, req C.MPI_Request) error {
	if rc != C.MPI_SUCCESS {
		return mpiError(rc)
	}
	o.reqs = append(o.reqs, req)
	return nil
}

// AllReduce is MPI_Iallreduce, in place.
func (g *Group) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduce(t, op); err != nil {
		return pg.Completed(err)
	}
	return g.allReduce(ctx, pg.OpAllReduce, []pg.Tensor{t}, op)
}

// allReduce reduces every tensor of ts as one Work (one request each).
func (g *Group) allReduce(ctx context.Context, kind pg.OpType, ts []pg.Tensor, op pg.ReduceOp) pg.Work {
	bufs := make([]cbuf, len(ts))
	bytes := 0
	pinner := new(runtime.Pinner)
	for _, t := range ts {
		if err := checkCount(t.Len()); err != nil {
			return pg.Completed(err)
		}
		bytes += len(t.Data)
	}
	for i, t := range ts {
		if direct(t, op, g.size) {
			bufs[i] = pin(pinner, t) // reduced in place, no copies
		} else {
			bufs[i] = reduceIn(t, op, g.size)
		}
	}
	o := &mpiWork{kind: kind, pinner: pinner,
		start: func(o *mpiWork) error {
			for i, t := range ts {
				var req C.MPI_Request
				rc := C.goddp_iallreduce(bufs[i].p, C.int(t.Len()), C.int(reduceDtype(t.Dtype)), C.int(mpiOp(op)), g.comm, &req)
				if err := o.post(rc, req); err != nil {
					return err
				}
			}
			return nil
		},
		finish: func(o *mpiWork) error {
			for i, t := range ts {
				if bufs[i].pinned {
					divideInPlace(t, op, g.size)
				} else {
					reduceOut(t, bufs[i], 0, op, g.size)
				}
			}
			return nil
		},
		release: func() { freeAll(bufs); pinner.Unpin() },
	}
	return g.submit(ctx, o, dtypeOf(ts), bytes, bytes, nil)
}

func freeAll(bs []cbuf) {
	for i := range bs {
		bs[i].free()
	}
}

// dtypeOf is the WorkInfo dtype of a batch: the first tensor's.
func dtypeOf(ts []pg.Tensor) pg.Dtype {
	if len(ts) == 0 {
		return 0
	}
	return ts[0].Dtype
}

// Broadcast is MPI_Ibcast.
func (g *Group) Broadcast(ctx context.Context, t pg.Tensor, root int) pg.Work {
	if err := backend.CheckBroadcast(t, root, g.size); err != nil {
		return pg.Completed(err)
	}
	if err := checkCount(t.Len()); err != nil {
		return pg.Completed(err)
	}
	pinner := new(runtime.Pinner)
	var b cbuf
	if len(t.Data) > 0 {
		b = pin(pinner, t) // in place, no copies
	} else {
		b = moveIn(t)
	}
	o := &mpiWork{kind: pg.OpBroadcast, pinner: pinner,
		start: func(o *mpiWork) error {
			var req C.MPI_Request
			return o.post(C.goddp_ibcast(b.p, C.int(t.Len()), C.int(moveDtype(t.Dtype)), C.int(root), g.comm, &req), req)
		},
		release: func() { b.free(); pinner.Unpin() },
	}
	return g.submit(ctx, o, t.Dtype, len(t.Data), len(t.Data), nil)
}

// AllGather is MPI_Iallgather.
func (g *Group) AllGather(ctx context.Context, out, in pg.Tensor) pg.Work {
	if err := backend.CheckAllGather(out, in, g.size); err != nil {
		return pg.Completed(err)
	}
	return g.allGather(ctx, pg.OpAllGather, []pg.Tensor{out}, []pg.Tensor{in})
}

func (g *Group) allGather(ctx context.Context, kind pg.OpType, outs, ins []pg.Tensor) pg.Work {
	src := make([]cbuf, len(ins))
	dst := make([]cbuf, len(ins))
	inB, outB := 0, 0
	for i := range ins {
		if err := checkCount(outs[i].Len()); err != nil {
			return pg.Completed(err)
		}
	}
	pinner := new(runtime.Pinner)
	for i := range ins {
		if len(ins[i].Data) > 0 && !overlaps(ins[i].Data, outs[i].Data) {
			src[i], dst[i] = pin(pinner, ins[i]), pin(pinner, outs[i]) // no copies
		} else {
			src[i], dst[i] = moveIn(ins[i]), newCbuf(len(outs[i].Data))
		}
		inB += len(ins[i].Data)
		outB += len(outs[i].Data)
	}
	o := &mpiWork{kind: kind, pinner: pinner,
		start: func(o *mpiWork) error {
			for i, in := range ins {
				var req C.MPI_Request
				if err := o.post(C.goddp_iallgather(src[i].p, dst[i].p, C.int(in.Len()), C.int(moveDtype(in.Dtype)), g.comm, &req),
					req); err != nil {
					return err
				}
			}
			return nil
		},
		finish: func(o *mpiWork) error {
			for i := range outs {
				if !dst[i].pinned {
					copy(outs[i].Data, dst[i].bytes())
				}
			}
			return nil
		},
		release: func() { freeAll(src); freeAll(dst); pinner.Unpin() },
	}
	return g.submit(ctx, o, dtypeOf(ins), inB, outB, nil)
}

// ReduceScatter is MPI_Ireduce_scatter_block.
func (g *Group) ReduceScatter(ctx context.Context, out, in pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatter(out, in, op, g.size); err != nil {
		return pg.Completed(err)
	}
	return g.reduceScatter(ctx, pg.OpReduceScatter, []pg.Tensor{out}, []pg.Tensor{in}, op)
}

func (g *Group) reduceScatter(ctx context.Context, kind pg.OpType, outs, ins []pg.Tensor, op pg.ReduceOp) pg.Work {
	src := make([]cbuf, len(ins))
	dst := make([]cbuf, len(ins))
	inB, outB := 0, 0
	for i := range ins {
		if err := checkCount(ins[i].Len()); err != nil {
			return pg.Completed(err)
		}
		src[i] = reduceIn(ins[i], op, g.size)
		dst[i] = newCbuf(reduceBytes(outs[i].Dtype, outs[i].Len()))
		inB += len(ins[i].Data)
		outB += len(outs[i].Data)
	}
	o := &mpiWork{kind: kind,
		start: func(o *mpiWork) error {
			for i, out := range outs {
				var req C.MPI_Request
				rc := C.goddp_ireduce_scatter_block(src[i].p, dst[i].p, C.int(out.Len()), C.int(reduceDtype(out.Dtype)),
					C.int(mpiOp(op)), g.comm, &req)
				if err := o.post(rc, req); err != nil {
					return err
				}
			}
			return nil
		},
		finish: func(o *mpiWork) error {
			for i, out := range outs {
				reduceOut(out, dst[i], 0, op, g.size)
			}
			return nil
		},
		release: func() { freeAll(src); freeAll(dst) },
	}
	return g.submit(ctx, o, dtypeOf(ins), inB, outB, nil)
}

// Barrier is MPI_Ibarrier.
func (g *Group) Barrier(ctx context.Context) pg.Work {
	o := &mpiWork{kind: pg.OpBarrier,
		start: func(o *mpiWork) error {
			var req C.MPI_Request
			return o.post(C.goddp_ibarrier(g.comm, &req), req)
		},
	}
	return g.submit(ctx, o, 0, 0, 0, nil)
}

// Reduce is MPI_Ireduce; off the root t is left unchanged.
func (g *Group) Reduce(ctx context.Context, t pg.Tensor, root int, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduce(t, root, op, g.size); err != nil {
		return pg.Completed(err)
	}
	if err := checkCount(t.Len()); err != nil {
		return pg.Completed(err)
	}
	b := reduceIn(t, op, g.size)
	isRoot := 0
	if g.rank == root {
		isRoot = 1
	}
	o := &mpiWork{kind: pg.OpReduce,
		start: func(o *mpiWork) error {
			var req C.MPI_Request
			rc := C.goddp_ireduce(b.p, C.int(t.Len()), C.int(reduceDtype(t.Dtype)), C.int(mpiOp(op)), C.int(root), C.int(isRoot),
				g.comm, &req)
			return o.post(rc, req)
		},
		finish: func(o *mpiWork) error {
			if isRoot == 1 {
				reduceOut(t, b, 0, op, g.size)
			}
			return nil
		},
		release: b.free,
	}
	return g.submit(ctx, o, t.Dtype, len(t.Data), len(t.Data), nil)
}

// Gather is MPI_Igather.
func (g *Group) Gather(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	if err := backend.CheckGather(out, in, root, g.rank, g.size); err != nil {
		return pg.Completed(err)
	}
	if err := checkCount(in.Len() * g.size); err != nil {
		return pg.Completed(err)
	}
	src := moveIn(in)
	var dst cbuf
	if g.rank == root {
		dst = newCbuf(len(in.Data) * g.size)
	}
	o := &mpiWork{kind: pg.OpGather,
		start: func(o *mpiWork) error {
			var req C.MPI_Request
			return o.post(C.goddp_igather(src.p, dst.p, C.int(in.Len()), C.int(moveDtype(in.Dtype)), C.int(root), g.comm, &req),
				req)
		},
		finish: func(o *mpiWork) error {
			if g.rank == root {
				copy(out.Data, dst.bytes())
			}
			return nil
		},
		release: func() { src.free(); dst.free() },
	}
	return g.submit(ctx, o, in.Dtype, len(in.Data), len(out.Data), nil)
}

// Scatter is MPI_Iscatter.
func (g *Group) Scatter(ctx context.Context, out, in pg.Tensor, root int) pg.Work {
	if err := backend.CheckScatter(out, in, root, g.rank, g.size); err != nil {
		return pg.Completed(err)
	}
	if err := checkCount(out.Len() * g.size); err != nil {
		return pg.Completed(err)
	}
	var src cbuf
	if g.rank == root {
		src = moveIn(in)
	}
	dst := newCbuf(len(out.Data))
	o := &mpiWork{kind: pg.OpScatter,
		start: func(o *mpiWork) error {
			var req C.MPI_Request
			return o.post(C.goddp_iscatter(src.p, dst.p, C.int(out.Len()), C.int(moveDtype(out.Dtype)), C.int(root), g.comm,
				&req), req)
		},
		finish:  func(o *mpiWork) error { copy(out.Data, dst.bytes()); return nil },
		release: func() { src.free(); dst.free() },
	}
	return g.submit(ctx, o, out.Dtype, len(in.Data), len(out.Data), nil)
}

// AllToAll is MPI_Ialltoallv (equal chunks too).
func (g *Group) AllToAll(ctx context.Context, out, in pg.Tensor, outSplits, inSplits []int) pg.Work {
	outS, inS, err := backend.CheckAllToAll(out, in, outSplits, inSplits, g.size)
	if err != nil {
		return pg.Completed(err)
	}
	if err := errors.Join(checkCount(in.Len()), checkCount(out.Len())); err != nil {
		return pg.Completed(err)
	}
	displs := func(s []int) []int {
		d := make([]int, len(s))
		for i := 1; i < len(s); i++ {
			d[i] = d[i-1] + s[i-1]
		}
		return d
	}
	src, dst := moveIn(in), newCbuf(len(out.Data))
	sc, sd, rc, rd := newCints(inS), newCints(displs(inS)), newCints(outS), newCints(displs(outS))
	o := &mpiWork{kind: pg.OpAllToAll,
		start: func(o *mpiWork) error {
			var req C.MPI_Request
			return o.post(C.goddp_ialltoallv(src.p, sc.p, sd.p, dst.p, rc.p, rd.p, C.int(moveDtype(in.Dtype)), g.comm, &req),
				req)
		},
		finish: func(o *mpiWork) error { copy(out.Data, dst.bytes()); return nil },
		release: func() {
			src.free()
			dst.free()
			sc.free()
			sd.free()
			rc.free()
			rd.free()
		},
	}
	return g.submit(ctx, o, in.Dtype, len(in.Data), len(out.Data), nil)
}

// AllReduceCoalesced reduces every tensor of ts as one Work: one
// MPI_Iallreduce per tensor, all in flight at once.
func (g *Group) AllReduceCoalesced(ctx context.Context, ts []pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckAllReduceCoalesced(ts, op); err != nil {
		return pg.Completed(err)
	}
	return g.allReduce(ctx, pg.OpAllReduceCoalesced, ts, op)
}

// AllGatherCoalesced is AllGather for every pair, as one Work.
func (g *Group) AllGatherCoalesced(ctx context.Context, outs, ins []pg.Tensor) pg.Work {
	if err := backend.CheckAllGatherCoalesced(outs, ins, g.size); err != nil {
		return pg.Completed(err)
	}
	return g.allGather(ctx, pg.OpAllGatherCoalesced, outs, ins)
}

// ReduceScatterCoalesced is ReduceScatter for every pair, as one Work.
func (g *Group) ReduceScatterCoalesced(ctx context.Context, outs, ins []pg.Tensor, op pg.ReduceOp) pg.Work {
	if err := backend.CheckReduceScatterCoalesced(outs, ins, op, g.size); err != nil {
		return pg.Completed(err)
	}
	return g.reduceScatter(ctx, pg.OpReduceScatterCoalesced, outs, ins, op)
}
