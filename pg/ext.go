package pg

import (
	"context"
	"errors"
)

// The optional abilities of a process group. ProcessGroup holds only what
// DDP needs; the rest of c10d's Backend is split into the small interfaces
// below, found with As, which looks behind wrappers as errors.As does:
//
//	var r pg.Rooted
//	if pg.As(g, &r) { w := r.Reduce(ctx, t, 0, pg.Op(pg.Sum)) }
//
// Every backend in this module (local, tcp, and mpi and nccl) implements
// all of them; Extended names the whole set. Each collective keeps
// ProcessGroup's contract: asynchronous, the same order on every rank,
// tensors owned by the group until the Work is done, and never a hang.

// Rooted is implemented by groups that have the rooted collectives.
type Rooted interface {
	// Reduce reduces t across ranks with op into root's t. The other
	// ranks' t are left unchanged.
	Reduce(ctx context.Context, t Tensor, root int, op ReduceOp) Work
	// Gather writes rank i's in to out[i*in.Len() : (i+1)*in.Len()] on
	// root, whose out must hold Size()*in.Len() elements. Other ranks'
	// out is not touched and may be empty.
	Gather(ctx context.Context, out, in Tensor, root int) Work
	// Scatter writes in[i*out.Len() : (i+1)*out.Len()] of root's in to
	// rank i's out. Only root's in is read; it must hold Size()*out.Len()
	// elements. Other ranks' in may be empty.
	Scatter(ctx context.Context, out, in Tensor, root int) Work
}

// AllToAller is implemented by groups that have c10d's alltoall_base.
type AllToAller interface {
	// AllToAll sends chunk j of in to rank j, which writes it to chunk i
	// of out, where i is this rank. With nil splits the chunks are equal:
	// in and out hold Size()*k elements. Otherwise inSplits[j] is the
	// number of elements this rank sends to rank j and outSplits[i] the
	// number it receives from rank i; both have Size() entries, any of
	// which may be zero, and sum to in.Len() and out.Len(). outSplits[i]
	// on rank j must equal inSplits[j] on rank i. Chunks are laid out
	// back to back in rank order, as in c10d.
	AllToAll(ctx context.Context, out, in Tensor, outSplits, inSplits []int) Work
}

// PointToPoint is implemented by groups that have send and recv.
//
// A Send to dst with tag matches the Recv on dst from this rank with the
// same tag; between one pair of ranks, messages with the same tag are
// received in the order they were sent, as MPI's non-overtaking rule
// says. The receiver's t must hold exactly the sent number of bytes;
// otherwise both sides fail with ErrInvalidArgument. Point-to-point calls
// need not be issued in the same order as collectives on other ranks, but
// each Work must still finish within the group timeout. Receiving from
// any source is not offered.
//
// One exception, as in c10d: NCCL pairs sends and receives by order and
// has no tags, so pg/nccl ignores tags, and its sends and receives must be
// issued in the same order on both sides and at the same point relative
// to collectives (ProcessGroupNCCL behaves the same way). pgtest checks it
// with Options.OrderedPointToPoint.
type PointToPoint interface {
	Send(ctx context.Context, t Tensor, dst, tag int) Work
	Recv(ctx context.Context, t Tensor, src, tag int) Work
}

// Coalescer is implemented by groups that issue several collectives of
// one kind as one (c10d's allreduce_coalesced and friends). The lot takes
// one sequence number and returns one Work. Every rank must pass the same
// number of tensors with the same dtypes and lengths. StartCoalescing
// builds on these methods.
type Coalescer interface {
	// AllReduceCoalesced reduces every tensor of ts in place with op.
	AllReduceCoalesced(ctx context.Context, ts []Tensor, op ReduceOp) Work
	// AllGatherCoalesced is AllGather(outs[i], ins[i]) for every i.
	AllGatherCoalesced(ctx context.Context, outs, ins []Tensor) Work
	// ReduceScatterCoalesced is ReduceScatter(outs[i], ins[i], op) for
	// every i.
	ReduceScatterCoalesced(ctx context.Context, outs, ins []Tensor, op ReduceOp) Work
}

// NoColor is the color that leaves a rank out of every group in Split, as
// NCCL_SPLIT_NOCOLOR does.
const NoColor = -1

// Splitter is implemented by groups that can make subgroups. Both methods
// are collectives of the parent group: every rank of the parent calls
// them, in the same order as its other collectives. A subgroup is an
// independent group: its own sequence numbers, its own links, the
// parent's timeout; a fault in it fails it (and, since it shares
// processes, may fail siblings that include the faulty rank) but never
// the parent or subgroups that do not include the faulty rank. Closing
// the parent does not close its subgroups; close each one.
type Splitter interface {
	// NewGroup is c10d's new_group(ranks): ranks (distinct, any order;
	// the subgroup's rank i is ranks[i]) must be the same on every rank.
	// Members get the subgroup; other ranks get nil and no error.
	NewGroup(ctx context.Context, ranks []int) (ProcessGroup, error)
	// Split is ncclCommSplit: ranks that pass the same color form a
	// group, ordered by key and then by parent rank. A rank that passes
	// NoColor gets nil and no error.
	Split(ctx context.Context, color, key int) (ProcessGroup, error)
}

// CompletionHooker is implemented by groups that report every finished
// Work, as c10d's registerOnCompletionHook. Hooks run on one goroutine
// per group, in completion order, after the Work's Done is closed; a slow
// hook delays later hooks, never collectives. Hooks must not call back
// into the group's blocking methods.
type CompletionHooker interface {
	OnCompletion(hook func(WorkInfo))
}

// Extended is the whole set: what every backend in this module offers.
type Extended interface {
	ProcessGroup
	MonitoredBarrierer
	Backender
	Rooted
	AllToAller
	PointToPoint
	Coalescer
	Splitter
	CompletionHooker
}

// ErrUnsupported is wrapped by the errors of groups asked for an ability
// they do not have.
var ErrUnsupported = errors.New("not supported by this process group")
