// Package local is the in-process process-group backend: N ranks as
// goroutines in one process, sharing memory. It serves tests and examples,
// and training several replicas on one machine.
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
// only queues, so any number may be in flight. Collective number s of
// every rank meets in a shared slot (see Note [Matching by sequence
// number]). When every rank has arrived and all agree on the op, dtype,
// length and root, each rank does its share straight from its peers'
// buffers, with no copies in between:
//
//   - AllReduce is the fused shard algorithm: rank r reduces elements
//     [r*L/n, (r+1)*L/n) of every rank's buffer, in rank order, and writes
//     the result into every rank's buffer. AVG and PREMUL_SUM scale each
//     rank's own buffer before it arrives, integer AVG divides after.
//     Every rank ends with the same bits.
//   - Broadcast, AllGather and ReduceScatter copy or reduce from the
//     peers' buffers into the rank's own. ReduceScatter leaves its input
//     unchanged.
//
// A departure barrier then holds every rank until all have finished, so
// no buffer goes back to its owner while a peer still reads or writes it.
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
