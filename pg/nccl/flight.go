package nccl

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
)

// FlightState is where a recorded collective is.
type FlightState uint8

// The states of a FlightEntry.
const (
	stateScheduled FlightState = iota + 1 // issued, its event not passed
	stateCompleted
	stateFailed
)

func (s FlightState) String() string {
	switch s {
	case stateScheduled:
		return "scheduled"
	case stateCompleted:
		return "completed"
	case stateFailed:
		return "failed"
	}
	return "unknown"
}

// FlightEntry is one collective in the flight recorder, as an entry of
// c10d's NCCL trace buffer.
type FlightEntry struct {
	Seq               uint64
	Op                pg.OpType
	Peer              int // for Send and Recv; pg.NoPeer otherwise
	Dtype             pg.Dtype
	InBytes, OutBytes int64
	State             FlightState
	Issued, Finished  time.Time
}

// flightRecorder is a bounded ring of the last collectives, which the
// watchdog logs when one times out. It is kept beside pg/flight, the
// recorder every backend gets (and ddp-train puts over this group too),
// because it lives inside the watchdog and sees what a wrapper cannot:
// when each collective's CUDA event passed. pg/flight's dumps, in
// torch's layout, are the ones to merge; folding this ring's event
// times into them is left to do (docs/observability.md).
type flightRecorder struct {
	mu   sync.Mutex
	ring []FlightEntry
	next int // index of the next slot
	n    int // entries held
}

func newFlightRecorder(size int) *flightRecorder {
	return &flightRecorder{ring: make([]FlightEntry, size)}
}

func (f *flightRecorder) add(e FlightEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ring[f.next] = e
	f.next = (f.next + 1) % len(f.ring)
	if f.n < len(f.ring) {
		f.n++
	}
}

// finish marks the newest entry for (seq, op) done.
func (f *flightRecorder) finish(seq uint64, op pg.OpType, s FlightState, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 1; i <= f.n; i++ {
		e := &f.ring[(f.next-i+len(f.ring))%len(f.ring)]
		if e.Seq == seq && e.Op == op && e.State == stateScheduled {
			e.State, e.Finished = s, at
			return
		}
	}
}

// entries returns the ring, oldest first.
func (f *flightRecorder) entries() []FlightEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]FlightEntry, 0, f.n)
	for i := f.n; i >= 1; i-- {
		out = append(out, f.ring[(f.next-i+len(f.ring))%len(f.ring)])
	}
	return out
}

// dump logs every entry, oldest first.
func (f *flightRecorder) dump(log *zap.Logger, msg string) {
	es := f.entries()
	log.Error(msg, zap.Int("entries", len(es)))
	for _, e := range es {
		fields := []zap.Field{zap.Uint64("seq", e.Seq), zap.Stringer("op", e.Op), zap.Stringer("state", e.State),
			zap.Stringer("dtype", e.Dtype), zap.Int64("in_bytes", e.InBytes), zap.Int64("out_bytes", e.OutBytes),
			zap.Time("issued", e.Issued)}
		if e.Peer != pg.NoPeer {
			fields = append(fields, zap.Int("peer", e.Peer))
		}
		if !e.Finished.IsZero() {
			fields = append(fields, zap.Duration("took", e.Finished.Sub(e.Issued)))
		}
		log.Error("nccl flight recorder", fields...)
	}
}
