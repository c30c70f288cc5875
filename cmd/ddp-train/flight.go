package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"go.uber.org/zap"
)

// Note [flight recorder]
//
// Every worker's group is wrapped in a pg/flight Recorder, on by default
// (it costs a few hundred nanoseconds per collective; pg/flight's
// BenchmarkRecord). Each rank dumps it, in torch's JSON layout, to
// DIR/nccl_trace_rank_<rank>:
//
//   - when a collective of its fails (a timeout, a dead peer, a
//     mismatch), into --flight-dir, or CHECKPOINT/flight with
//     --checkpoint, or, under ddp-train's own launcher, the failure
//     report's directory (REPORT/flight, Note [debug endpoint and
//     report]), or nowhere: a job without an output directory leaves no
//     files behind it;
//   - on SIGUSR1, into --flight-dir, or CHECKPOINT/flight, or the
//     temporary directory (torch's default is /tmp/nccl_trace_rank_N)
//     without either, also under ddp-train's own launcher: never into the
//     report's directory, which is removed when the run ends well or by a
//     signal, so that a dump the user asked for is kept where the log
//     line says. A hung job can always be asked; SIGUSR1 never kills a
//     worker.
//
// The dump is written to a temporary file (O_EXCL) renamed into place,
// so a link planted at its name is replaced, not followed; and
// CHECKPOINT/flight, which the run makes, is not written through when it
// is a link (checkFlightDir refuses it up front, the dump at the time).
//
// `ddp-train fr-trace DIR` merges the ranks' dumps (frtrace.go).
//
// With --backend nccl this is the NCCL group's only recorder (pg/nccl's
// Note [one flight recorder]): Wrap finds the group behind pg/desync and
// pg/instrument and attaches itself, the watchdog's CUDA-event times
// reach the entries through those wrappers' Works, and the watchdog logs
// the recorder when a collective times out.

// flightDir is where failures dump the recorder: "" for nowhere.
func flightDir(c config) string {
	if c.flightDir != "" {
		return c.flightDir
	}
	if c.checkpointDir != "" {
		return filepath.Join(c.checkpointDir, "flight")
	}
	if dir := os.Getenv(reportDirEnv); dir != "" { // ddp-train's own launcher: beside the stacks (debug.go)
		return filepath.Join(dir, "flight")
	}
	return ""
}

// signalDir is where SIGUSR1 dumps the recorder (Note [flight
// recorder]).
func signalDir(c config) string {
	if c.flightDir != "" {
		return c.flightDir
	}
	if c.checkpointDir != "" {
		return filepath.Join(c.checkpointDir, "flight")
	}
	return os.TempDir()
}

// wrapFlight wraps g in a flight recorder of the job's rank that dumps
// on failure and on SIGUSR1 (Note [flight recorder]); stop ends the
// signal watch.
func wrapFlight(g pg.ProcessGroup, c config, rank int, logger *zap.Logger) (rec *flight.Recorder, stop func(),
	err error) {
	dump := func(dir, why string) {
		if c.flightDir == "" && c.checkpointDir != "" && dir == filepath.Join(c.checkpointDir, "flight") {
			if err := ownSubdir(dir); err != nil { // outputs.go
				logger.Warn("flight recorder not dumped", zap.String("why", why), zap.Error(err))
				return
			}
		}
		path, err := rec.DumpFile(dir)
		if err != nil {
			logger.Warn("flight recorder not dumped", zap.String("why", why), zap.Error(err))
			return
		}
		logger.Info("flight recorder dumped", zap.String("why", why), zap.String("path", path))
	}
	o := flight.Options{GlobalRank: rank, Timeout: c.timeout}
	if dir := flightDir(c); dir != "" {
		o.OnFailure = func(error) { dump(dir, "a collective failed") }
	}
	if rec, err = flight.Wrap(g, o); err != nil {
		return nil, nil, err
	}
	sig := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(sig, syscall.SIGUSR1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-sig:
				dump(signalDir(c), "SIGUSR1")
			case <-done:
				return
			}
		}
	})
	return rec, func() { signal.Stop(sig); close(done); wg.Wait() }, nil
}
