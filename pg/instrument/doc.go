// Package instrument wraps any pg.ProcessGroup with Prometheus metrics
// of its collectives, without touching the backends:
//
//	g, err := instrument.Wrap(group, reg)
//	// use g wherever group was used; g.Close closes group too
//
// It observes ddp_collective_seconds{op}, the time from issuing a
// collective to its completion, and counts ddp_collective_bytes_total{op},
// the bytes of each collective's input tensor, with the constant labels
// rank and backend. op is allreduce, broadcast, allgather, reducescatter
// or barrier.
//
// Completion is seen by one goroutine per wrapped group that waits on
// the Works in issue order, which is the order every backend completes
// them (each runs its collectives one at a time). Close stops it.
//
// The wrapper keeps the group's optional abilities: it is a
// pg.Backender, and a pg.MonitoredBarrierer exactly when the wrapped
// group is one.
package instrument
