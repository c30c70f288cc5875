package pg

import (
	"context"
	"fmt"
)

// Coalescing gathers collectives to issue as one, as c10d's
// startCoalescing and endCoalescing (and torch's _coalescing_manager):
//
//	c := pg.StartCoalescing(g)
//	c.AllReduce(a, pg.Op(pg.Sum))
//	c.AllReduce(b, pg.Op(pg.Sum))
//	err := c.End(ctx).Wait(ctx) // one collective, one Work
//
// Every call must be of the kind of the first (allreduce with one op,
// allgather, or reducescatter with one op); End reports a mix as
// ErrInvalidArgument without issuing anything. A Coalescing is used by
// one goroutine.
type Coalescing struct {
	g         ProcessGroup
	kind      OpType
	op        ReduceOp
	outs, ins []Tensor
	err       error
}

// StartCoalescing begins a batch on g. g, or a group behind it (see As),
// must implement Coalescer.
func StartCoalescing(g ProcessGroup) *Coalescing { return &Coalescing{g: g} }

func (c *Coalescing) add(kind OpType, op ReduceOp, out *Tensor, in Tensor) {
	if c.err != nil {
		return
	}
	if c.kind == 0 {
		c.kind, c.op = kind, op
	} else if c.kind != kind || c.op != op {
		c.err = fmt.Errorf("%w: coalescing %v %v after %v %v; a batch holds one kind of collective", ErrInvalidArgument, kind,
			op, c.kind, c.op)
		return
	}
	c.ins = append(c.ins, in)
	if out != nil {
		c.outs = append(c.outs, *out)
	}
}

// AllReduce adds an in-place allreduce of t to the batch.
func (c *Coalescing) AllReduce(t Tensor, op ReduceOp) { c.add(OpAllReduceCoalesced, op, nil, t) }

// AllGather adds AllGather(out, in) to the batch.
func (c *Coalescing) AllGather(out, in Tensor) { c.add(OpAllGatherCoalesced, ReduceOp{}, &out, in) }

// ReduceScatter adds ReduceScatter(out, in, op) to the batch.
func (c *Coalescing) ReduceScatter(out, in Tensor, op ReduceOp) {
	c.add(OpReduceScatterCoalesced, op, &out, in)
}

// End issues the batch as one collective and returns its Work. An empty
// batch is a finished Work.
func (c *Coalescing) End(ctx context.Context) Work {
	if c.err != nil {
		return Completed(c.err)
	}
	if c.kind == 0 {
		return Completed(nil)
	}
	var co Coalescer
	if !As(c.g, &co) {
		return Completed(fmt.Errorf("%w: %s groups cannot coalesce: %w", ErrInvalidArgument, BackendName(c.g),
			ErrUnsupported))
	}
	switch c.kind {
	case OpAllReduceCoalesced:
		return co.AllReduceCoalesced(ctx, c.ins, c.op)
	case OpAllGatherCoalesced:
		return co.AllGatherCoalesced(ctx, c.outs, c.ins)
	default:
		return co.ReduceScatterCoalesced(ctx, c.outs, c.ins, c.op)
	}
}
