package local

import (
	"fmt"

	"github.com/goddp/ddp/pg"
)

// opKind names a collective: pg's OpType, plus the two internal
// collectives that make subgroups.
type opKind uint8

const (
	opAllReduce              = opKind(pg.OpAllReduce)
	opBroadcast              = opKind(pg.OpBroadcast)
	opAllGather              = opKind(pg.OpAllGather)
	opReduceScatter          = opKind(pg.OpReduceScatter)
	opBarrier                = opKind(pg.OpBarrier)
	opMonitoredBarrier       = opKind(pg.OpMonitoredBarrier)
	opReduce                 = opKind(pg.OpReduce)
	opGather                 = opKind(pg.OpGather)
	opScatter                = opKind(pg.OpScatter)
	opAllToAll               = opKind(pg.OpAllToAll)
	opSend                   = opKind(pg.OpSend)
	opRecv                   = opKind(pg.OpRecv)
	opAllReduceCoalesced     = opKind(pg.OpAllReduceCoalesced)
	opAllGatherCoalesced     = opKind(pg.OpAllGatherCoalesced)
	opReduceScatterCoalesced = opKind(pg.OpReduceScatterCoalesced)

	// opNewGroup and opSplit agree on a subgroup: an allgather of the
	// ranks lists or of the (color, key) pairs.
	opNewGroup opKind = 200 + iota
	opSplit
)

func (k opKind) String() string {
	switch k {
	case opNewGroup:
		return "new_group"
	case opSplit:
		return "split"
	}
	return pg.OpType(k).String()
}

// opType is the OpType completion hooks see. The subgroup collectives are
// allgathers.
func (k opKind) opType() pg.OpType {
	if k == opNewGroup || k == opSplit {
		return pg.OpAllGather
	}
	return pg.OpType(k)
}

// desc is what every rank must agree on for a collective to run. It is
// comparable with ==; what does not fit in it (split sizes, the tensor
// lists of coalesced collectives, new_group's ranks) is compared by
// disagree.
type desc struct {
	kind  opKind
	dtype pg.Dtype
	// elements: of t, of AllGather's and Gather's in, of ReduceScatter's and Scatter's out; tensors of a coalesced
	// collective; new_group's ranks
	len  int
	root int // Broadcast, Reduce, Gather, Scatter
	op   pg.ReduceKind
}

func (d desc) String() string {
	switch d.kind {
	case opAllReduce, opReduceScatter:
		return fmt.Sprintf("%v(%v x %d, %v)", d.kind, d.dtype, d.len, d.op)
	case opReduce:
		return fmt.Sprintf("%v(%v x %d, %v, root %d)", d.kind, d.dtype, d.len, d.op, d.root)
	case opBroadcast, opGather, opScatter:
		return fmt.Sprintf("%v(%v x %d, root %d)", d.kind, d.dtype, d.len, d.root)
	case opAllGather:
		return fmt.Sprintf("%v(%v x %d)", d.kind, d.dtype, d.len)
	case opAllToAll:
		return fmt.Sprintf("%v(%v)", d.kind, d.dtype)
	case opAllReduceCoalesced, opReduceScatterCoalesced:
		return fmt.Sprintf("%v(%d tensors, %v)", d.kind, d.len, d.op)
	case opAllGatherCoalesced:
		return fmt.Sprintf("%v(%d tensors)", d.kind, d.len)
	case opNewGroup:
		return fmt.Sprintf("%v(%d ranks)", d.kind, d.len)
	}
	return d.kind.String()
}

// args are one rank's buffers for a collective. AllReduce, Broadcast and
// Reduce use in only; the peers read and write it in place.
type args struct {
	in, out pg.Tensor
	op      pg.ReduceOp // with this rank's PREMUL_SUM factor

	// AllToAll: the element offsets of the chunks, one more than the
	// group size (inOff[j] is where the chunk for rank j starts).
	inOff, outOff []int

	// The coalesced collectives: the tensor lists (outs is nil for
	// AllReduceCoalesced).
	ins, outs []pg.Tensor

	// new_group's ranks, Split's color and key, and where the worker
	// finds the subgroup's world.
	ranks      []int
	color, key int
	sub        *subResult
}
