package local

import (
	"fmt"

	"github.com/goddp/ddp/pg"
)

// opKind names a collective.
type opKind uint8

const (
	opAllReduce opKind = iota + 1
	opBroadcast
	opAllGather
	opReduceScatter
	opBarrier
	opMonitoredBarrier
)

func (k opKind) String() string {
	switch k {
	case opAllReduce:
		return "allreduce"
	case opBroadcast:
		return "broadcast"
	case opAllGather:
		return "allgather"
	case opReduceScatter:
		return "reducescatter"
	case opBarrier:
		return "barrier"
	case opMonitoredBarrier:
		return "monitored_barrier"
	}
	return fmt.Sprintf("opKind(%d)", uint8(k))
}

// desc is what every rank must agree on for a collective to run. It is
// comparable with ==.
type desc struct {
	kind  opKind
	dtype pg.Dtype
	len   int // elements: of t, of AllGather's in, of ReduceScatter's out
	root  int // Broadcast only
	op    pg.ReduceKind
}

func (d desc) String() string {
	switch d.kind {
	case opAllReduce, opReduceScatter:
		return fmt.Sprintf("%v(%v x %d, %v)", d.kind, d.dtype, d.len, d.op)
	case opBroadcast:
		return fmt.Sprintf("%v(%v x %d, root %d)", d.kind, d.dtype, d.len, d.root)
	case opAllGather:
		return fmt.Sprintf("%v(%v x %d)", d.kind, d.dtype, d.len)
	}
	return d.kind.String()
}

// args are one rank's buffers for a collective. AllReduce and Broadcast
// use in only; the peers read and write it in place.
type args struct {
	in, out pg.Tensor
	op      pg.ReduceOp // with this rank's PREMUL_SUM factor
}
