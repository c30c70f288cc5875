// Command ddp-train trains a Gorgonia model data-parallel. It is goddp's
// torchrun and training script in one.
//
//	go run ./cmd/ddp-train                      # 2 worker processes over TCP on loopback, synthetic data
//	go run ./cmd/ddp-train --backend local --nproc 4
//	go run ./cmd/ddp-train --data X.npy --labels y.npy --model mlp --hidden 512,512 --epochs 3
//
// With --nproc N (the default mode) it starts N copies of itself as
// workers, each told its rank, the world size, a loopback rendezvous
// address and a fresh per-job secret; if one fails, the others are
// stopped and ddp-train exits non-zero naming the failed rank, or, with
// --max-restarts N, all of them are restarted, from the newest
// --checkpoint, up to N times. On SIGINT or SIGTERM, the workers finish
// their step, agree on it, write a checkpoint (with --checkpoint) and
// exit with 128+signal, as ddp-train does. Started by
// an external launcher (torchrun or Kubernetes PyTorchJob variables:
// MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; mpirun's
// OMPI_COMM_WORLD_*; or Slurm's srun: SLURM_PROCID, SLURM_NTASKS, ...),
// it runs as one worker; the job secret comes from GODDP_SECRET. A
// launcher's environment cut short or contradicting another (pg/env) is
// exit 2 naming the variable, never a job of its own.
//
// `ddp-train fr-trace DIR` merges the ranks' flight-recorder dumps
// (--flight-dir) and names the collective where they parted.
//
// `ddp-train lighthouse --listen HOST:PORT --min-replicas N` serves the
// quorum of fault-tolerant training (package ft; Note [ddp-train
// lighthouse]) until SIGINT or SIGTERM.
//
// Exit codes (docs/ddp-train.md's table): 0 success, 1 a failed run, 2 bad flags
// or bad input, 3 the run diverged (a NaN or an infinity; Note [non-finite
// guard]), 128+signal (130, 143) stopped by SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"

	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg/env"
)

// workerEnv marks a process that ddp-train itself launched as a worker.
const workerEnv = "GODDP_DDP_TRAIN_WORKER"

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// run is ddp-train; it returns the exit code. A worker of ddp-train's own
// launcher exits exitWorkerUsage where ddp-train exits 2: Note [a crash is
// not bad input].
func run(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	code := runMain(args, lookup, stdout, stderr)
	if code != 2 || lookup == nil {
		return code
	}
	if _, launched := lookup(workerEnv); launched {
		return exitWorkerUsage
	}
	return code
}

// runMain is ddp-train, whatever its role.
func runMain(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "lighthouse" { // lighthouse.go: the quorum service of fault-tolerant training
		return runLighthouse(args[1:], lookup, stderr)
	}
	if len(args) > 0 && args[0] == "fr-trace" { // frtrace.go: merge flight-recorder dumps
		return runFrTrace(args[1:], stdout, stderr)
	}
	if err := checkAddressSpace(); err != nil { // before the runtime needs more threads: memory.go
		return report(stderr, err)
	}
	stderr, con := attachConsole(stderr) // terminal.go: Note [one writer owns the terminal]
	defer con.close()
	c, err := parseCommand(args, stderr) // `ddp-train eval ...` too (evalcmd.go)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return report(stderr, err)
	}
	ctx, intr := watchSignals(context.Background()) // elastic.go, Note [preemption]
	defer intr.close()
	c.intr = intr
	c.bar = sinkFor(c, con, lookup) // relay.go
	c.testSlow = testSlowFrom(lookup)

	if len(c.command) > 0 { // Note [launching a program]
		return report(stderr, intr.interrupted(runProgram(ctx, c, lookup, stdout, stderr)))
	}
	if c.backend == "mpi" { // mpi.go: MPI knows the ranks; no environment, store or launcher
		return report(stderr, intr.interrupted(runMPI(ctx, c, stdout, stderr)))
	}

	if c.faultTolerant { // ftlaunch.go, ftworker.go: Note [the fault-tolerant launcher]
		if c.ftReplay != "" {
			return report(stderr, intr.interrupted(runFTReplay(ctx, c, stderr)))
		}
		if id, ok := lookup(ftReplicaEnv); ok {
			return report(stderr, intr.interrupted(runFTWorker(ctx, c, id, lookup, stdout, stderr)))
		}
		return report(stderr, intr.interrupted(runFTLauncher(ctx, c, args, lookup, stdout, stderr)))
	}
	ecfg, err := env.FromLookup(lookup)
	if err != nil {
		return report(stderr, usageError{err})
	}
	_, launched := lookup(workerEnv)
	switch {
	case launched || ecfg.Source != env.SourceNone:
		c.ownLauncher = launched
		c = elasticWorker(c, ecfg, launched, stderr) // Note [restarts]
		err = runWorker(ctx, c, ecfg, stdout, stderr)
		code := report(stderr, intr.interrupted(err))
		if launched {
			writeVerdict(stderr, err) // Note [the headline names the culprit]
		}
		if code != 1 || !launched || !peerCaused(err) {
			return code
		}
		return exitPeerFailed // to our own launcher only: Note [first is not the cause]
	case c.backend == "local":
		err = runLocal(ctx, c, stdout, stderr)
	default:
		err = runLauncher(ctx, c, args, lookup, stdout, stderr)
	}
	return report(stderr, intr.interrupted(err))
}

// report prints err as one line (and a flag mistake's hint as a second)
// and picks the exit code.
func report(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	cli.Report(stderr, "ddp-train", err)
	var in *launch.Interrupted
	var div *divergedError
	switch {
	case errors.As(err, &in):
		return in.ExitCode() // 128+signal
	case isUsage(err):
		return 2
	case errors.As(err, &div):
		return exitDiverged
	}
	return 1
}

// runLauncher checks the inputs once, without holding the data set (Note
// [memory follows the work]), then starts the workers: the whole
// job, or with --nnodes this machine's share (nodes.go), whose outputs
// and checkpoints rank 0's machine checks and holds.
func runLauncher(ctx context.Context, c config, args []string, lookup func(string) (string, bool), stdout,
	stderr io.Writer) error {
	node, err := c.nodeFlags.node(lookup)
	if err != nil {
		return err
	}
	if err := checkListenAddr(c.listenAddr, c.nproc); err != nil { // flagrules.go: Note [no flag is ignored]
		return err
	}
	info, err := dataInfo(c) // the workers load it: Note [memory follows the work]
	if err != nil {
		return err
	}
	if err := checkInit(c, info); err != nil {
		return err
	}
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	if err := checkMemorySpec(c, info, 1, c.nproc, logger); err != nil {
		return err
	}
	if err := checkOutputs(c, c.nodeRank == 0); err != nil { // Note [outputs only on success]
		return err
	}
	if c.nodeRank == 0 {
		release, err := claimCheckpoint(c, logger) // Note [checkpoint directories are owned]
		if err != nil {
			return err
		}
		defer release()
	}
	if c.maxRestarts > 0 && c.checkpointDir == "" {
		logger.Warn("--max-restarts without --checkpoint: a restarted job starts again from step 0")
	}
	bar, err := startRelay(c.bar) // relay.go: the job's bar, from rank 0's reports
	if err != nil {
		return err
	}
	defer bar.close()
	report, err := newReportDir() // debug.go: Note [debug endpoint and report]
	if err != nil {
		return err
	}
	err = launch.SelfElastic(ctx, c.nproc, args, workerEnv+"=1", stdout, stderr, launch.Elastic{
		MaxRestarts: c.maxRestarts,
		Backoff:     c.restartBackoff,
		Grace:       stopGrace,
		Settle:      settleTime, // Note [first is not the cause]
		Retry: func(we *launch.WorkerError) bool { // bad input stays bad, and a diverged run diverges again
			code := exitCode(rootCause(we).Err) // Note [first is not the cause]
			return code != exitWorkerUsage && code != exitDiverged
		},
		Logger:     logger,
		Env:        append(append(bar.env(), report.env()...), workerThreads(lookup, c.nproc, logger)...),
		ExtraFiles: bar.files(),
		Hidden:     verdictPrefix, // read from the tails: Note [the headline names the culprit]
		// A stopped worker's stacks go to the report: Note [a stopped rank's report].
		StoppedStacks: report.stoppedStacks,
		Crashed:       report.crashed, // Note [a crash is not bad input]
		Node:          node,           // nil on one machine
	})
	return report.finish(launcherError(err, c, report), stderr) // elastic.go, debug.go
}

// lastReport returns the last error line a worker printed with report,
// without its "ddp-train: " prefix, or "".
func lastReport(tail string) string {
	lines := strings.Split(tail, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if line, ok := strings.CutPrefix(lines[i], "ddp-train: "); ok {
			return line
		}
	}
	return ""
}
