// Package instrument measures any pg.ProcessGroup's collectives with
// Prometheus metrics, without touching the backends:
//
//	g, err := instrument.Wrap(group, reg)
//	// use g wherever group was used; g.Close closes group too
//
// It observes ddp_collective_seconds{op}, the time from issuing a
// collective to its completion, and counts ddp_collective_bytes_total{op},
// the bytes of each collective's input tensor (for recv, of the tensor
// received), with the constant labels rank and backend. op is the
// pg.OpType's String: allreduce, broadcast, allgather, reducescatter,
// barrier, and, for groups that have them, monitored_barrier, reduce,
// gather, scatter, alltoall, send, recv and the _coalesced collectives.
// Failed collectives count their bytes but are not timed.
//
// For a group that reports completions (a pg.CompletionHooker, as every
// backend in this module is, found with pg.As) the measurements come
// from a completion hook, which also observes
// ddp_collective_queue_seconds{op}: how long each collective waited
// behind earlier ones before the backend started it. Wrap then returns
// the group itself, so all its optional interfaces (pg.Extended) remain,
// and Works issued on it directly are measured too.
//
// Any other group is wrapped: only its ProcessGroup collectives are
// measured, by one goroutine per wrapped group that waits on the Works
// in issue order, which is the order every backend completes them (each
// runs its collectives one at a time). Close stops it. The wrapper is a
// pg.Backender, and a pg.MonitoredBarrierer exactly when the wrapped
// group has one; pg.As finds the wrapped group's other abilities through
// the wrapper's Inner, unmeasured.
//
// # Counting bytes
//
// A [Counter] counts the calls and bytes issued through it, without
// Prometheus: the reducer counts a comm hook's bytes with one
// (ddp_comm_bytes_total{hook}). Unlike the watcher's wrapper it counts
// through every ability that communicates: pg.As on a Counter finds
// counting views of pg.Rooted, pg.PointToPoint, pg.Splitter and the
// rest, and subgroups it makes count into the same totals.
//
//	c := instrument.Count(g)
//	hook.Run(ctx, c, bucket)
//	sent := c.Bytes()
package instrument
