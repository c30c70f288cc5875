package nccl

import (
	"go.uber.org/zap"

	"github.com/goddp/ddp/pg/flight"
)

// Note [one flight recorder]
//
// The group keeps no ring of its own: its collectives are recorded by
// the pg/flight Recorder put over it (flight.Wrap; cmd/ddp-train puts
// one over every worker's group), in torch's layout, and what only the
// watchdog knows, when each collective's CUDA events passed, reaches
// that Recorder through the Works' Futures (Note [watchdog times]). The
// group is a flight.Attacher: Wrap hands it the Recorder, so that the
// watchdog, which sees a timeout before any caller does, can log it and
// dump it (Options.FlightDumpDir) as torch's watchdog dumps its flight
// recorder. A group nobody wrapped logs only the collectives pending
// when it timed out.

var _ flight.Attacher = (*Group)(nil)

// AttachFlight is called by flight.Wrap with the Recorder put over this
// group (flight.Attacher); a later Wrap replaces an earlier one.
func (g *Group) AttachFlight(r *flight.Recorder) { g.flight.Store(r) }

// FlightEntries is Options.FlightRecorderSize: the size of the ring
// flight.Wrap makes over this group when its own Options.Entries is 0.
func (g *Group) FlightEntries() int { return g.opts.FlightRecorderSize }

// FlightRecorder is the pg/flight Recorder put over this group, which
// records its collectives, or nil if it was not wrapped (flight.Wrap).
func (g *Group) FlightRecorder() *flight.Recorder { return g.flight.Load() }

// dumpFlight logs the flight recorder on a timeout, one line per entry
// under torch's key names, oldest first, and writes it to
// Options.FlightDumpDir if set. Without a recorder it logs what was
// pending.
func (g *Group) dumpFlight(culprit *work) {
	rec := g.flight.Load()
	if rec == nil {
		fields := []zap.Field{zap.String("hint", "wrap the group with pg/flight (flight.Wrap) to keep its last collectives")}
		if culprit != nil {
			fields = append(fields, zap.Stringer("op", culprit.op), zap.Uint64("seq", culprit.seq))
		}
		g.log.Error("nccl: collective timed out; no flight recorder", fields...)
		return
	}
	d := rec.Snapshot()
	g.log.Error("nccl: collective timed out; the flight recorder", zap.Int("entries", len(d.Entries)))
	for _, e := range d.Entries {
		fields := []zap.Field{zap.Uint64("record_id", e.RecordID), zap.Int("pg_id", e.PgID),
			zap.Uint64("collective_seq_id", e.CollectiveSeqID), zap.Uint64("p2p_seq_id", e.P2PSeqID),
			zap.String("profiling_name", e.ProfilingName), zap.String("state", e.State), zap.Bool("retired", e.Retired),
			zap.Int64("time_created_ns", e.TimeCreatedNs)}
		if e.TimeDiscoveredStartedNs != nil {
			fields = append(fields, zap.Int64("time_discovered_started_ns", *e.TimeDiscoveredStartedNs))
		}
		if e.TimeDiscoveredCompletedNs != nil {
			fields = append(fields, zap.Int64("time_discovered_completed_ns", *e.TimeDiscoveredCompletedNs))
		}
		if e.DurationMs != nil {
			fields = append(fields, zap.Float64("duration_ms", *e.DurationMs))
		}
		g.log.Error("nccl flight recorder", fields...)
	}
	if dir := g.opts.FlightDumpDir; dir != "" {
		if path, err := rec.DumpFile(dir); err != nil {
			g.log.Error("nccl: flight recorder not dumped", zap.Error(err))
		} else {
			g.log.Error("nccl: flight recorder dumped", zap.String("path", path))
		}
	}
}
