package main

// Elastic restarts and preemption.
//
// Note [restarts]: ddp-train's own launcher restarts every worker when
// one fails, up to --max-restarts times, as torchrun's --max_restarts
// does (launch.SelfElastic: backoff, a fresh rendezvous per attempt, and
// TORCHELASTIC_RESTART_COUNT in the workers' environment). Resuming is the
// workers' business, as under torchrun: a worker whose
// TORCHELASTIC_RESTART_COUNT is above 0 (from ddp-train or from torchrun)
// resumes from --checkpoint when one has been written there, and starts
// again from step 0 otherwise (no --checkpoint, or a failure before the
// first checkpoint). Resume is exact, so a restarted run ends with the
// parameters an uninterrupted one would have.
//
// Note [preemption]: on SIGINT or SIGTERM a worker finishes the step it
// is in. After every step the ranks allreduce (MAX) the signal each has
// received, 0 for none, so every rank sees the same value after the same
// step, and all stop there together: they write a checkpoint (with
// --checkpoint) of that step and exit with 128+signal. A signal that
// comes before the training loop (during the rendezvous, say) cancels the
// run at once, and so does a second signal. ddp-train's launcher forwards
// the signal to its workers, waits for them (up to stopGrace), does not
// restart them, and exits with 128+signal too.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/reducer"
	"go.uber.org/zap"
)

// stopGrace is how long ddp-train's launcher waits for a stopped worker
// (after forwarding a signal, or after another worker failed) before it
// kills it: time to finish a step and write a checkpoint. torchrun waits
// 30 s as well.
const stopGrace = 30 * time.Second

// elastic holds the flags of restarts, and the run's signal handling.
type elastic struct {
	maxRestarts    int           // --max-restarts
	restartBackoff time.Duration // --restart-backoff: before the first restart, doubling
	// not a flag: run's signal handling, shared by its ranks; nil in tests that build a config
	intr *interrupt
}

func (e *elastic) register(fs *flag.FlagSet) {
	fs.IntVar(&e.maxRestarts, "max-restarts", 0, "restart every worker, from the newest --checkpoint if any, up to N "+
		"times when one fails (torchrun's --max_restarts)")
	fs.DurationVar(&e.restartBackoff, "restart-backoff", time.Second,
		"wait before the first restart, doubled before each next one (at most 30s)")
}

func (e elastic) validate(backend string) error {
	switch {
	case e.maxRestarts < 0:
		return usagef("--max-restarts %d: want 0 or more", e.maxRestarts)
	case e.restartBackoff < 0:
		return usagef("--restart-backoff %v: want 0 or more", e.restartBackoff)
	case e.maxRestarts > 0 && backend == "local":
		return usagef("--max-restarts restarts worker processes: use it with --backend tcp")
	}
	return nil
}

// interrupt turns SIGINT and SIGTERM into a graceful stop (Note
// [preemption]).
type interrupt struct {
	sig    atomic.Int32 // the first signal received; 0: none
	armed  atomic.Bool  // a training loop polls requested; until then a signal cancels the run
	cancel context.CancelCauseFunc
	ch     chan os.Signal
	done   chan struct{}
	wg     sync.WaitGroup
}

// watchSignals returns a context that a signal cancels, with a
// *launch.Interrupted cause, unless a training loop has armed the
// returned interrupt. Call close when done.
func watchSignals(parent context.Context) (context.Context, *interrupt) {
	ctx, cancel := context.WithCancelCause(parent)
	in := &interrupt{cancel: cancel, ch: make(chan os.Signal, 2), done: make(chan struct{})}
	signal.Notify(in.ch, syscall.SIGINT, syscall.SIGTERM)
	in.wg.Go(func() {
		for {
			select {
			case s := <-in.ch:
				sig := s.(syscall.Signal)
				if in.sig.CompareAndSwap(0, int32(sig)) && in.armed.Load() {
					continue // stop after the current step
				}
				in.cancel(&launch.Interrupted{Signal: sig})
			case <-in.done:
				return
			}
		}
	})
	return ctx, in
}

// close stops watching and releases the context.
func (in *interrupt) close() {
	signal.Stop(in.ch)
	close(in.done)
	in.wg.Wait()
	in.cancel(nil)
}

// arm makes the first signal a graceful stop; nil-safe.
func (in *interrupt) arm() {
	if in != nil {
		in.armed.Store(true)
	}
}

// requested is the first signal received, or 0; nil-safe.
func (in *interrupt) requested() syscall.Signal {
	if in == nil {
		return 0
	}
	return syscall.Signal(in.sig.Load())
}

// interrupted makes err, the error of a run that got a signal, say so, so
// that ddp-train exits with 128+signal.
func (in *interrupt) interrupted(err error) error {
	var li *launch.Interrupted
	if sig := in.requested(); err != nil && sig != 0 && !errors.As(err, &li) {
		return fmt.Errorf("%w (%w)", err, &launch.Interrupted{Signal: sig})
	}
	return err
}

// signalled is an error that says msg and makes ddp-train exit 128+signal.
type signalled struct {
	msg string
	in  *launch.Interrupted
}

func (e *signalled) Error() string { return e.msg }
func (e *signalled) Unwrap() error { return e.in }

// stoppedError is a worker's graceful stop on a signal.
type stoppedError struct {
	sig        syscall.Signal
	step       int
	checkpoint string // "" without --checkpoint
}

func (e *stoppedError) Error() string {
	msg := fmt.Sprintf("stopped by %s after step %d", launch.SignalName(e.sig), e.step)
	if e.checkpoint != "" {
		msg += fmt.Sprintf("; checkpoint written to %s (continue with --resume)", e.checkpoint)
	}
	return msg
}

func (e *stoppedError) Unwrap() error { return &launch.Interrupted{Signal: e.sig} }

// agreeStop is the step's stop check (Note [preemption]): the largest
// signal number any rank has received, the same on every rank; 0 to go on.
// The same allreduce MAX carries whether some rank's loss was not finite
// (lossBad, Note [non-finite guard]) and, when check is set, the replica
// check's words (reducer: Note [replica check]); a replica mismatch fails
// every rank. Collective.
func (t *trainer) agreeStop(ctx context.Context, s *session, check, lossBad bool,
	comm time.Duration) (sig syscall.Signal, anyLossBad bool, err error) {
	if s.strag == nil {
		s.strag = newStragglers(t.c.stragglerFlags, t.g.Rank(), t.log, t.metrics)
	}
	s.strag.pause()
	n := t.g.Size() // each rank's wait in collectives: Note [stragglers, measured]
	v := append([]int64{int64(t.c.intr.requested()), 0}, s.strag.words(comm, n)...)
	if lossBad {
		v[1] = 1
	}
	var values []pg.Tensor
	if check {
		if values, err = s.replicaValues(); err != nil { // diloco.go: the global parameters under DiLoCo
			return 0, false, err
		}
		v = reducer.ReplicaWords(v, values)
	}
	began := time.Now()
	if err := t.g.AllReduce(ctx, pg.Int64s(v), pg.Op(pg.Max)).Wait(ctx); err != nil {
		return 0, false, fmt.Errorf("checking for a stop signal: %w", err)
	}
	now := time.Now()
	s.strag.observe(v[2:2+n], now.Sub(began), now)
	if check {
		if err := s.eng.Reducer().CheckReplicaWords(ctx, v[2+n:], values); err != nil {
			return 0, false, err
		}
	}
	return syscall.Signal(v[0]), v[1] != 0, nil
}

// stopAt ends a run that every rank agreed to stop after step: it writes
// a checkpoint of step with --checkpoint, unless saved already did.
func (t *trainer) stopAt(ctx context.Context, s *session, step int, sig syscall.Signal, saved bool) error {
	if t.c.checkpointDir != "" && !saved {
		if err := t.saveCheckpoint(ctx, s, step); err != nil {
			return err
		}
	}
	t.log.Warn("stopping", zap.Int("rank", t.g.Rank()), zap.String("signal", launch.SignalName(sig)),
		zap.Int("step", step))
	e := &stoppedError{sig: sig, step: step}
	if t.c.checkpointDir != "" {
		e.checkpoint = t.c.checkpointDir
	}
	return e
}

// elasticWorker prepares a worker's config for restarts (Note
// [restarts]): a restarted worker (TORCHELASTIC_RESTART_COUNT above 0)
// resumes from --checkpoint when a checkpoint has been written there.
// launched says whether ddp-train's own launcher started it; under
// another launcher, --max-restarts does nothing, and a warning says so.
func elasticWorker(c config, e env.Config, launched bool, stderr io.Writer) config {
	if !launched && c.maxRestarts > 0 {
		if log, err := newLogger(c, stderr); err == nil {
			log.Warn("--max-restarts restarts the workers of ddp-train's own launcher and does nothing here; under torchrun "+
				"use its --max-restarts", zap.Int("rank", e.Rank))
		}
	}
	if e.RestartCount > 0 && c.checkpointDir != "" {
		// Exists, not "the directory is non-empty": a save killed before
		// the first checkpoint leaves only a temporary folder behind.
		c.resume = c.resume || checkpoint.Exists(c.checkpointDir)
	}
	return c
}

// launcherError turns the launcher's error into ddp-train's: a failed
// worker named, with its last line; a stop on a signal as 128+signal.
func launcherError(err error, c config, report reportDir) error {
	var we *launch.WorkerError
	if !errors.As(err, &we) {
		return err
	}
	all := we
	we = rootCause(we)
	line := lastReport(we.Tail)
	var in *launch.Interrupted
	if errors.As(we.Err, &in) { // the launcher's own signal, forwarded
		if line == "" {
			return fmt.Errorf("%w; stopped the workers", in)
		}
		return fmt.Errorf("%w; stopped the workers: %s", in, line)
	}
	if sig, ok := launch.StoppedBySignal(we.Err); ok { // a worker got the signal, and stopped every rank
		msg := line // "rank R: stopped by SIG after step N; ..."
		if msg == "" {
			msg = fmt.Sprintf("worker rank %d stopped by %s", we.Rank, launch.SignalName(sig))
		}
		return &signalled{msg: msg, in: &launch.Interrupted{Signal: sig}}
	}
	if exitCode(we.Err) == 2 { // the Go runtime's: Note [a crash is not bad input]
		return crashError(we, report, c)
	}
	if h := culpritHeadline(all); h != "" && (exitCode(we.Err) == exitPeerFailed || killed(we.Err)) {
		return culpritError(h, we, line, c) // Note [the headline names the culprit]
	}
	// The worker already printed its own error line; name the rank, and
	// repeat the worker's line (with pg/desync's diagnosis, it names the
	// rank at fault) so that the last line says it all.
	what := fmt.Sprintf("worker rank %d failed", we.Rank)
	if c.maxRestarts > 0 {
		plural := "s"
		if we.Attempt == 1 {
			plural = ""
		}
		what += fmt.Sprintf(" (after %d restart%s; --max-restarts %d)", we.Attempt, plural, c.maxRestarts)
	}
	status := we.Err.Error()
	switch exitCode(we.Err) {
	case exitPeerFailed: // every failure came from a peer: the line names the culprit
		status = "it lost a peer or the store"
	case exitWorkerUsage:
		status = "exit status 2" // what it would have exited with on its own
	}
	err = fmt.Errorf("%s: %s", what, status)
	if line != "" {
		err = fmt.Errorf("%s: %s: %s", what, status, line)
	}
	switch exitCode(we.Err) {
	case exitWorkerUsage:
		return usageError{err}
	case exitDiverged:
		return &divergedError{msg: err.Error()}
	}
	return err
}

// exitPeerFailed is the exit code of a worker of ddp-train's own
// launcher whose run failed because a peer or the store failed (a
// communication error, a timeout, a peer's report): the launcher then
// names another worker's failure as the cause when there is one. Users
// never see it: the launcher reports 1.
const exitPeerFailed = 4

// exitWorkerUsage is the exit code of a worker of ddp-train's own
// launcher that found bad flags or bad input, where ddp-train exits 2:
// the launcher exits 2 for it, and never restarts it. Users never see it.
// Note [a crash is not bad input].
const exitWorkerUsage = 5

// Note [a crash is not bad input]: the Go runtime exits with status 2 when
// a program panics, runs out of memory or hits a fatal error, the code
// ddp-train documents as "bad flags or bad input, do not retry". So a
// worker of ddp-train's own launcher reports its bad input with
// exitWorkerUsage instead, and the launcher takes a worker's status 2 for
// a crash: it exits 1 (retryable; --max-restarts restarts it) with one
// line, the first of the runtime's report and the file that holds it
// all (launch.Spec.Crashed diverts the report there, off the terminal:
// rank-N/crash.txt in the report directory, Note [debug endpoint and
// report]). Under another launcher (torchrun, srun, mpirun) nothing can
// tell the two apart from outside, and a dying process cannot change its
// runtime's status: a crash exits 2 with Go's report on stderr, as any Go
// program's does. What ddp-train does there is refuse up front what would
// exhaust memory (Note [memory follows the work]). Nor can any process
// report its own runtime's death: under a small ulimit -v (below about
// 1.5 GiB) the Go runtime may fail to start a thread at any moment, even
// before main; checkAddressSpace, ddp-train's first act, refuses such a
// limit with one line when it gets to run (under ulimit -v 800000, three
// times in four).

// crashError is the launcher's error for a worker that crashed.
func crashError(we *launch.WorkerError, report reportDir, c config) error {
	first := crashLine(we.Tail)
	if first == "" {
		first = "the Go runtime's exit status 2"
	}
	what := fmt.Sprintf("worker rank %d crashed", we.Rank)
	if c.maxRestarts > 0 {
		plural := "s"
		if we.Attempt == 1 {
			plural = ""
		}
		what += fmt.Sprintf(" (after %d restart%s; --max-restarts %d)", we.Attempt, plural, c.maxRestarts)
	}
	return fmt.Errorf("%s: %s (a Go runtime crash, not bad input; the full report is in %s)", what, first,
		report.crashFile(we.Rank))
}

// crashLine is the first line of a Go runtime crash report in a worker's
// tail (launch.Spec.Crashed keeps it there), or "".
func crashLine(tail string) string {
	lines := strings.Split(tail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for _, p := range []string{"panic: ", "fatal error: ", "runtime: ", "runtime/cgo: ", "SIG"} {
			if strings.HasPrefix(lines[i], p) {
				return lines[i]
			}
		}
	}
	return ""
}

// settleTime is how long the launcher lets the other workers end after
// the first fails, to see which failure is the cause.
const settleTime = 2 * time.Second

// peerCaused reports whether err came from another process: a lost or
// failed peer, the store, or a collective that timed out waiting.
func peerCaused(err error) bool {
	for _, e := range []error{pg.ErrComm, pg.ErrRemote, pg.ErrTimeout, pg.ErrAborted, pg.ErrClosed, store.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// rootCause picks, among the workers that failed on their own, the first
// whose failure was not caused by another's (Note [first is not the
// cause]); the first failure when all were.
func rootCause(we *launch.WorkerError) *launch.WorkerError {
	if exitCode(we.Err) != exitPeerFailed {
		return we
	}
	for _, f := range we.Failures {
		if code := exitCode(f.Err); code != exitPeerFailed {
			root := *we
			root.Rank, root.Err, root.Tail = f.Rank, f.Err, f.Tail
			return &root
		}
	}
	return we
}

// exitCode is a worker's exit status, or -1.
func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	return -1
}
