// Package local is the in-process process-group backend: N ranks as
// goroutines in one process, sharing memory. It serves tests and examples,
// and training several replicas on one machine. A *Group implements
// pg.Extended: every collective of c10d's Backend, point-to-point,
// coalescing, subgroups and completion hooks.
//
//	groups, err := local.New(4, local.Options{Timeout: time.Minute})
//	...
//	// in rank r's goroutine:
//	w := groups[r].AllReduce(ctx, pg.Float32s(grad), pg.Op(pg.Avg))
//	err := w.Wait(ctx)
//	...
//	groups[r].Close()
//
// # How a collective runs
//
// Each rank has one worker goroutine, started by New and stopped by Close,
// that runs the rank's collectives one at a time in issue order; issuing
// only queues, so any number, of any kinds, may be in flight. Collectives
// are numbered from 1 in issue order (Work.Seq), and collective number s
// of every rank meets in a shared slot (see Note [Matching by sequence
// number]). When every rank has arrived and all agree on the op, dtype,
// length and root, each rank does its share straight from its peers'
// buffers, with no copies in between:
//
//   - AllReduce is the fused shard algorithm: rank r reduces elements
//     [r*L/n, (r+1)*L/n) of every rank's buffer, in rank order, and writes
//     the result into every rank's buffer. AVG and PREMUL_SUM scale each
//     rank's own buffer before it arrives, integer AVG divides after.
//     Every rank ends with the same bits.
//   - Reduce is the same with the root's buffer as the only output; the
//     other ranks' tensors are left unchanged (they scale a copy).
//   - Broadcast, AllGather, ReduceScatter, Gather and Scatter copy or
//     reduce from the peers' buffers. ReduceScatter leaves its input
//     unchanged.
//   - AllToAll (c10d's alltoall_base) copies chunk r of every rank's input
//     into rank r's output. Uneven split sizes, zeros included, are
//     checked pair by pair as the ranks arrive: outSplits[i] on rank j
//     must equal inSplits[j] on rank i, or the collective fails on every
//     rank with pg.ErrMismatch (and pg.ErrInvalidArgument) naming the two
//     ranks, before any byte moves.
//   - AllReduceCoalesced, AllGatherCoalesced and ReduceScatterCoalesced
//     (and pg.StartCoalescing on top of them) are one collective: one
//     slot, one sequence number, one Work. The ranks must agree on the
//     number of tensors and on each one's dtype and length.
//
// A departure barrier then holds every rank until all have finished, so
// no buffer goes back to its owner while a peer still reads or writes it.
//
// # Send and Recv
//
// Send and Recv are not collectives: they take no slot and no collective
// number, and are numbered per peer and direction from 1 instead. A Send
// meets the oldest unmatched Recv from its rank with its tag, so messages
// between two ranks with one tag arrive in the order they were sent (see
// Note [Point-to-point matching]); the receiver copies straight from the
// sender's tensor and both Works finish together. The receiver's tensor
// must hold exactly the bytes sent, or both fail with
// pg.ErrInvalidArgument. An unmatched call fails with pg.ErrTimeout after
// the group timeout or when its ctx ends. There is no receive from any
// source: name the peer.
//
// # Subgroups
//
// NewGroup (c10d's new_group) and Split (ncclCommSplit) are collectives of
// the parent group: every rank calls them in its collective order, and
// they agree on the ranks lists or gather the (color, key) pairs like an
// allgather. Members get a new *Group on a new in-process world, with its
// own worker and sequence numbers and the parent's timeout and logger;
// other ranks get nil. Subgroups of subgroups work the same. A rank that
// closes or aborts a subgroup fails that subgroup on its peers, with an
// error naming it by its subgroup rank and its parent rank; the parent
// and other subgroups go on. Closing the parent does not close its
// subgroups: close each one.
//
// # Completion hooks
//
// OnCompletion's hooks receive a pg.WorkInfo (op, sequence number, dtype,
// bytes, times, error) for every issued Work once it is done, Send and
// Recv included; NewGroup and Split are reported as allgathers. Calls
// refused before issue (Seq 0) are not reported. Close delivers what is
// pending and stops the hooks' goroutine.
//
// # Failures
//
// Ranks that disagree fail with pg.ErrMismatch naming both. A rank whose
// peers do not arrive within the group timeout or its ctx fails with
// pg.ErrTimeout naming the missing ranks. Close or Abort on one rank fails
// its own pending collectives (pg.ErrClosed, pg.ErrAborted) and every
// other rank's pending and later ones (pg.ErrRemote naming it). A failed
// collective fails on every rank, including one that arrives late, so the
// ranks stay in step and the group stays usable: unlike backends whose
// streams desynchronise, a timeout does not abort the group.
package local
