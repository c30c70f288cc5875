package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"

	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg/env"
)

// Note [launching a program]
//
// ddp-train [flags] PROGRAM [ARGS...] is ddp-train as torchrun is
// `torchrun --nproc_per_node N --no_python PROGRAM`: it trains nothing
// itself, starts --nproc copies of PROGRAM with the rendezvous
// environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT and a fresh GODDP_SECRET), supervises them as
// it does its own workers (one failure stops the rest; --max-restarts
// restarts all of them with a fresh port and secret; SIGINT and SIGTERM
// are forwarded) and exits with the first failure's code. The program
// joins the job with dist.InitProcessGroup, with no options. Only the
// launcher's flags apply (--nproc, --oversubscribe, --max-restarts,
// --restart-backoff); the training flags belong to ddp-train's own
// model and are refused here so that nobody thinks they reach PROGRAM.

// launcherFlag reports whether a flag applies when ddp-train launches a
// program.
func launcherFlag(name string) bool {
	switch name {
	case "nproc", "oversubscribe", "max-restarts", "restart-backoff", "log-format", "nnodes", "node-rank", "master-addr",
		"master-port":
		return true
	}
	return false
}

// runProgram launches c.command on this machine.
func runProgram(ctx context.Context, c config, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	if e, err := env.FromLookup(lookup); err == nil && e.Source != env.SourceNone {
		return usagef(
			"ddp-train %s: this process was started by %s, which launches the ranks itself; run %s directly under it",
			c.command[0], e.Source, c.command[0])
	}
	for _, name := range c.setFlags {
		if !launcherFlag(name) {
			return usagef("ddp-train %s: --%s is a training flag of ddp-train's own model and does not reach %s; pass the "+
				"program's flags after its name, and only --nproc, --oversubscribe, --max-restarts, --restart-backoff, "+
				"--log-format, --nnodes, --node-rank, --master-addr and --master-port before it", c.command[0], name, c.command[0])
		}
	}
	path, err := exec.LookPath(c.command[0])
	if err != nil {
		return usagef("ddp-train: cannot run %q: %v", c.command[0], err)
	}
	node, err := c.nodeFlags.node(lookup)
	if err != nil {
		return err
	}
	logger, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	defer logger.Sync()
	err = launch.ProgramElastic(ctx, c.nproc, path, c.command[1:], nil, stdout, stderr, launch.Elastic{
		MaxRestarts: c.maxRestarts,
		Backoff:     c.restartBackoff,
		Grace:       stopGrace,
		Settle:      settleTime,
		Logger:      logger,
		EveryStdout: true, // each rank's lines, prefixed, as torchrun --tee
		Node:        node,
		Env:         workerThreads(lookup, c.nproc, logger), // threads.go
	})
	if err != nil {
		return fmt.Errorf("%s: %w", c.command[0], err)
	}
	return nil
}
