package pg

import "fmt"

// OpType names a collective, as c10d's OpType does. Its String form is the
// name used in errors, logs and metric labels ("allreduce", "alltoall").
type OpType uint8

// The collectives. The zero value means "not a collective".
const (
	OpAllReduce OpType = iota + 1
	OpBroadcast
	OpAllGather
	OpReduceScatter
	OpBarrier
	OpMonitoredBarrier
	OpReduce
	OpGather
	OpScatter
	OpAllToAll
	OpSend
	OpRecv
	OpAllReduceCoalesced
	OpAllGatherCoalesced
	OpReduceScatterCoalesced
)

// OpTypes lists every OpType.
func OpTypes() []OpType {
	return []OpType{OpAllReduce, OpBroadcast, OpAllGather, OpReduceScatter, OpBarrier, OpMonitoredBarrier,
		OpReduce, OpGather, OpScatter, OpAllToAll, OpSend, OpRecv,
		OpAllReduceCoalesced, OpAllGatherCoalesced, OpReduceScatterCoalesced}
}

func (o OpType) String() string {
	switch o {
	case OpAllReduce:
		return "allreduce"
	case OpBroadcast:
		return "broadcast"
	case OpAllGather:
		return "allgather"
	case OpReduceScatter:
		return "reducescatter"
	case OpBarrier:
		return "barrier"
	case OpMonitoredBarrier:
		return "monitored_barrier"
	case OpReduce:
		return "reduce"
	case OpGather:
		return "gather"
	case OpScatter:
		return "scatter"
	case OpAllToAll:
		return "alltoall"
	case OpSend:
		return "send"
	case OpRecv:
		return "recv"
	case OpAllReduceCoalesced:
		return "allreduce_coalesced"
	case OpAllGatherCoalesced:
		return "allgather_coalesced"
	case OpReduceScatterCoalesced:
		return "reducescatter_coalesced"
	}
	return fmt.Sprintf("OpType(%d)", uint8(o))
}

// IsPointToPoint reports whether o is Send or Recv, which are numbered
// apart from the collectives (see Work.Seq).
func (o OpType) IsPointToPoint() bool { return o == OpSend || o == OpRecv }
