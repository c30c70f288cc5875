// Package flight is a flight recorder for any process group: it keeps
// the last operations each rank issued, so that after a hang or a
// timeout every rank can say what it last did, and the ranks' accounts
// can be merged to name the collective where they parted and the ranks
// that never arrived or issued something else.
//
//	rec, err := flight.Wrap(group, flight.Options{
//		Timeout:   timeout,
//		OnFailure: func(error) { rec.DumpFile(dir) },
//	})
//	// use rec wherever group was used; rec.Close closes group too
//	rec.Dump(w)          // on request: JSON to any io.Writer
//	rec.DumpFile(dir)    // dir/nccl_trace_rank_<global rank>
//
// A [Recorder] holds a bounded ring ([DefaultEntries], 2000, as torch's
// TORCH_FR_BUFFER_SIZE) of collectives and point-to-point operations,
// each with its sequence numbers, op, input and output sizes and
// dtypes, state (scheduled, started, completed), and when it was
// created and found started and completed: by the recorder's own
// polls, or, for a backend that knows (pg.TimedWork: pg/nccl's
// watchdog, from CUDA events), by the backend, with torch's duration_ms
// when it measured one (Note [event times]). Recording is a mutex, a
// clock read and a few stores per operation and no goroutine (see Note
// [discovered, not watched]), cheap enough to be on by default:
// BenchmarkRecord and BenchmarkAllReduce measure it.
//
// # Wrapping
//
// A Recorder follows pg's Note [wrappers keep abilities]: it has Inner,
// and pg.As on it finds recording views of pg.Rooted, pg.AllToAller,
// pg.PointToPoint, pg.Coalescer, pg.Splitter and pg.Extended when the
// group inside has them, so sends, receives and the rest are recorded
// too. Subgroups made through its Splitter record into the same ring
// under their own name and pg_id, so one dump per process holds every
// group, as torch's does. Other abilities are found on the group inside
// and are not recorded.
//
// # Dumps and the merge
//
// A dump is the JSON of PyTorch's flight recorder (see Note [torch's
// layout]), so torch's analyzer (tools/flight_recorder/fr_trace.py)
// can read it. [ReadDir] reads a directory of every rank's dumps, and
// [Analyze] prints, per group, what torch's analyzer prints: the first
// collective some ranks never issued ("Not all ranks joining collective
// ...", with the missing ranks) or issued with another op, sizes or
// dtypes. cmd/ddp-train's fr-trace subcommand runs it.
package flight
