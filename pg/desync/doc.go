// Package desync wraps a process group so that a stalled or failed
// collective names the rank at fault on every rank, as c10d's desync
// debug (TORCH_NCCL_DESYNC_DEBUG) and ProcessGroupWrapper
// (TORCH_DISTRIBUTED_DEBUG=DETAIL) do.
//
//	g, err := desync.Wrap(inner, st, desync.Options{}) // st: the job's rendezvous store
//	...
//	err = g.AllReduce(ctx, t, pg.Op(pg.Sum)).Wait(ctx)
//	var se *pg.StallError
//	if errors.As(err, &se) { log.Printf("look at ranks %v", se.Culprits()) }
//
// # The diagnosis
//
// The Group numbers the collectives it issues (Work.Seq) and records, for
// this rank, the last one entered (issued) with its signature, and the
// last up to which all had finished. A responder goroutine parks on the
// store key "desync/<name>/request".
//
// When a collective fails with a timeout, communication or remote error,
// the Group runs the diagnosis once: it sets the request key, publishes
// its own progress as "desync/<name>/progress/<rank>" (every live rank's
// responder does the same on the request), and waits up to
// Options.DiagnosisTimeout for every other rank's. Then, for the failed
// collective #S:
//
//   - ranks that did not publish are silent: stopped (SIGSTOP, a debugger)
//     or dead;
//   - ranks that published an entered number below S are behind: alive,
//     but they never issued #S (stuck in compute, or in a different code
//     path);
//   - ranks that issued a different collective as #S than the majority
//     are mismatched (a desynchronisation);
//   - if the store itself does not answer, that is said, with the rank that
//     hosts it (Options.StoreHost), which is then likely the stopped one.
//
// The failing Work, and every later failure of the group, returns a
// *pg.StallError carrying the diagnosis; it wraps the original error's
// kind (pg.ErrTimeout, pg.ErrComm or pg.ErrRemote) and the error itself.
// The diagnosis starts on the first Wait or Err that sees a failure (Done
// closes when the wrapped Work's does; Err then takes up to
// DiagnosisTimeout plus ProbeTimeout, and Wait until its ctx ends,
// returning the collective's own error if the ctx ends first); a rank
// that sees no failure answers through its responder.
// Every rank reads the same reports, so all name the same culprit. The
// message names the culprits first, then what this rank was doing, what
// to check, and the backend's own error, on one line (wrapped below, each
// continuation indented). On a 3-rank ddp-train job whose
// rank 2 was stopped with SIGSTOP, rank 1 reported (rank 0 the same,
// with "rank 0" and its own cause):
//
//	pg: rank 2 did not answer (stopped or busy: its host 127.0.0.1 answers, but the process does not respond) while rank
//	    1 waited in allreduce #2360; check rank 2: is its process alive, stopped, or stuck outside collectives? (cause:
//	    pg: allreduce on rank 1 with peer rank 0: timeout: collective #2360 made no progress with rank 0 before its
//	    deadline (group timeout 3s))
//
// When rank 2 is alive but never issued the collective:
//
//	pg: rank 2 is behind (its last collective is allreduce #1; it never entered #2) while rank 0 waited in allreduce #2;
//	    check rank 2: is its process alive, stopped, or stuck outside collectives? (cause: ...)
//
// A desynchronisation is found even without the check (here over TCP,
// where it hangs until the timeout):
//
//	pg: rank 2 issued broadcast(float32 x1000, root 0) as #1 where rank 0 issued allreduce(float32 x1000, SUM) while rank
//	    1 waited in allreduce #1; make every rank issue the same collectives in the same order (cause: ...)
//
// Between ranks that share memory (pg/tcp's default on one host) there
// is no hang to diagnose: pg/tcp compares every chunk's call with its
// peers' and fails at once with pg.ErrMismatch naming the peer and both
// calls, which the Group passes on as it is.
//
// In a subgroup, ranks are the subgroup's, with their parent ranks:
//
//	pg: rank 2 (parent rank 3) is behind (it has issued no collective; it never entered #1) while rank 0 of group world/1
//	    waited in allreduce #1; ...
//
// When the store does not answer (here rank 0, its host, was stopped):
//
//	pg: the store did not answer (hosted by rank 0: stopped or busy: its host 127.0.0.1 answers, but the process does not
//	    respond) while rank 1 waited in allreduce #2064; check rank 0: is its process alive, stopped, or stuck outside
//	    collectives? (store: timeout: store: set ["desync/world/request"]: no answer from 127.0.0.1:43155 within 3.003s;
//	    cause: pg: allreduce on rank 1 with peer rank 0: remote error: rank 2 failed: timeout: ...)
//
// # Network or process
//
// When the wrapped group can probe its peers (backend.PeerProber: pg/tcp
// keeps each rank's listener open for this), the diagnosis also dials
// every other rank's listener once as it starts, alongside the wait for
// progress (in a group of more than 65 ranks, only the silent ranks,
// after the wait), bounded by Options.ProbeTimeout (1 s), and says of
// each silent rank what answered (pg's Note [network or process]): the
// host but not the process (stopped or busy), a refusal (the process is
// gone), or nothing (the network to it is down or partitioned). When the
// store does not answer, it names the ranks whose host does not answer
// as unreachable. On 2 network-namespace hosts of
// 2 ranks each (cmd/ddp-train's TestNetbedFaults), host 1's link taken
// down mid-run:
//
//	pg: ranks 2, 3 did not answer (unreachable: their host 10.98.0.2 does not answer: the network to it is down or
//	    partitioned) while rank 0 waited in allreduce #N; check the network between this host and 10.98.0.2 (ranks 2, 3)
//	    (cause: ...)
//
// and on host 1:
//
//	pg: ranks 0, 1 cannot be reached (unreachable: their host 10.98.0.1 does not answer: the network to it is down or
//	    partitioned); the store did not answer (hosted by rank 0, which cannot be reached) while rank 2 waited in
//	    allreduce #N; ...
//
// A stopped rank: "rank 3 did not answer (stopped or busy: its host
// 10.98.0.2 answers, but the process does not respond)"; a killed one:
// "rank 3 did not answer (gone: its host 10.98.0.2 refused the
// connection: the process is gone)".
//
// A rank that finishes its diagnosis sets "desync/<name>/verdict"; ranks
// still waiting then take a last short look and stop, so all ranks report
// within moments of each other (a launcher stops the other workers as
// soon as one exits).
//
// Point-to-point calls pass through without diagnosis.
//
// # Checking collectives
//
// With Options.CheckCollectives, before each collective the ranks
// allgather a fixed-size fingerprint of it on the wrapped group (op,
// dtype, element counts, root, reduce op, hashes of coalesced shapes and
// of all-to-all split sizes) and compare; only then is the collective
// issued. A disagreement fails it on every rank with a *pg.MismatchError
// instead of a hang or a corrupted buffer, and the group stays usable:
//
//	pg: rank 0: collective #3 differs across ranks: rank 2 issued broadcast(float32 x1024, root 0) where rank 0 issued
//	    allreduce(float32 x1024, SUM) (this rank: allreduce(float32 x1024, SUM)); make every rank issue the same
//	    collectives in the same order with the same dtypes, sizes and roots
//
// The check runs on one goroutine in issue order, so the order stays the
// same on every rank; it costs one small allgather per collective. On 2
// local ranks (BenchmarkAllReduce, a shared 2-core machine), allreduce
// time relative to the bare group (medians of 5): wrapped 1.14x at 4 KiB
// and 1.02x at 1 MiB; with the check 1.65x and 1.10x.
//
// # Subgroups
//
// NewGroup and Split return wrapped subgroups whose keys live under
// "desync/<name>/<k>", k counting the parent's NewGroup and Split calls,
// which is the same on every rank. Split first allgathers every rank's
// (color, key) through the parent to learn the members' parent ranks.
package desync
