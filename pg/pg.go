package pg

import (
	"context"
	"time"
)

// DefaultTimeout is the group timeout when none is set: 30 minutes, as in
// gloo and c10d's default_pg_timeout.
const DefaultTimeout = 30 * time.Minute

// MaxWorldSize is the largest group any backend of this module accepts,
// and the largest world size pg/env takes from a launcher: 65536 ranks.
// Each rank of pg/tcp's full mesh holds Size-1 connections, so 65535
// sockets per process, already beyond most hosts' open-file limits; the
// state every backend keeps per peer (sequence numbers, addresses, the
// desync wrapper's progress and fingerprints) then stays within a few
// megabytes per rank. A larger value is a corrupt or mistyped launcher
// variable (WORLD_SIZE=2000000000), and would otherwise be allocated
// before any peer is met. pg/local's in-process worlds have a lower
// bound of their own (local.MaxWorldSize).
const MaxWorldSize = 1 << 16

// ProcessGroup is a set of ranks that run collectives together, like c10d's
// Backend. Every collective is asynchronous: it returns at once with a Work.
//
// Contract:
//   - Every rank must issue the same collectives in the same order, with
//     the same dtypes and lengths. Many may be in flight at once; each
//     completes correctly however many there are.
//   - The tensors passed in belong to the group until the Work is done.
//     The caller must not read or write them before then.
//   - A collective that cannot finish within the group timeout (or whose
//     ctx ends) fails with ErrTimeout; a dead peer fails it with ErrComm or
//     ErrRemote naming the peer. No collective blocks forever.
//   - ctx bounds the collective: if it ends first, the collective fails
//     and, since the ranks are now out of step, the group is aborted.
type ProcessGroup interface {
	// Rank is this process's rank in [0, Size).
	Rank() int
	// Size is the number of ranks.
	Size() int

	// AllReduce reduces t across ranks, in place, with op.
	AllReduce(ctx context.Context, t Tensor, op ReduceOp) Work
	// Broadcast copies root's t into t on every other rank.
	Broadcast(ctx context.Context, t Tensor, root int) Work
	// AllGather writes rank i's in to out[i*in.Len() : (i+1)*in.Len()] on
	// every rank. out must hold Size()*in.Len() elements.
	AllGather(ctx context.Context, out, in Tensor) Work
	// ReduceScatter reduces in across ranks with op and writes chunk
	// Rank() of the result to out. in must hold Size()*out.Len() elements.
	ReduceScatter(ctx context.Context, out, in Tensor, op ReduceOp) Work
	// Barrier finishes once every rank has entered it.
	Barrier(ctx context.Context) Work

	// Abort fails every pending and future collective with ErrAborted
	// (wrapping cause, if any) without waiting for peers.
	Abort(cause error)
	// Close releases every goroutine and socket. Pending collectives fail
	// with ErrClosed. Close is idempotent.
	Close() error
}

// MonitoredBarrierer is implemented by groups that offer c10d's
// monitored_barrier: a barrier that, when ranks fail to arrive within
// timeout, fails with a *MissingRanksError naming them. With waitAll false
// it reports the first missing rank only, as c10d's wait_all_ranks=False.
type MonitoredBarrierer interface {
	MonitoredBarrier(ctx context.Context, timeout time.Duration, waitAll bool) error
}

// Backender is implemented by groups that can name their backend
// ("local", "tcp", "nccl").
type Backender interface {
	Backend() string
}

// BackendName returns the backend name of g, or of the first group in
// its chain of wrappers that has one (see As), or "unknown".
func BackendName(g ProcessGroup) string {
	var b Backender
	if As(g, &b) {
		return b.Backend()
	}
	return "unknown"
}
