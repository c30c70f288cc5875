package main

import (
	"flag"
	"time"
)

// ftFlags are --fault-tolerant's (docs/fault-tolerance.md).
type ftFlags struct {
	faultTolerant bool
	ftMinReplicas int
	ftLighthouse  string        // an external lighthouse; empty: the launcher serves one
	ftTimeout     time.Duration // a step's collectives and vote, a rendezvous, a recovery
	ftJoin        time.Duration // the embedded lighthouse's join timeout
	ftHeartbeat   time.Duration // the embedded lighthouse's heartbeat timeout
	ftRecord      string        // the committed steps, as JSON lines
	ftOrderedSum  bool
	ftReplay      string // --ft-replay: a record to replay in one process
}

func (f *ftFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.faultTolerant, "fault-tolerant", false, "train --nproc replicas that survive failures without "+
		"restarting: a quorum every step, failed steps discarded everywhere, dead replicas restarted and healed live "+
		"from a peer (docs/fault-tolerance.md)")
	fs.IntVar(&f.ftMinReplicas, "min-replicas", 1, "--fault-tolerant: the fewest replicas a step may have")
	fs.StringVar(&f.ftLighthouse, "lighthouse", "", "--fault-tolerant: the address of a `ddp-train lighthouse` to "+
		"use instead of the launcher's own (replicas on other machines join through it)")
	fs.DurationVar(&f.ftTimeout, "ft-timeout", 10*time.Second, "--fault-tolerant: a step's collectives, its vote, a "+
		"group's rendezvous and a recovery each fail after this; a stalled replica costs one such wait")
	fs.DurationVar(&f.ftJoin, "ft-join-timeout", time.Second, "--fault-tolerant: how long the launcher's lighthouse "+
		"waits for healthy replicas that have not asked for the next quorum")
	fs.DurationVar(&f.ftHeartbeat, "ft-heartbeat-timeout", 5*time.Second, "--fault-tolerant: a replica silent this "+
		"long is not healthy (the launcher's lighthouse; torchft's default)")
	fs.StringVar(&f.ftRecord, "ft-record", "", "--fault-tolerant: write every committed step (its quorum, "+
		"participants and batches) as JSON lines to this file")
	fs.BoolVar(&f.ftOrderedSum, "ft-ordered-sum", false, "--fault-tolerant: sum the gradients in replica order "+
		"(gathered: replicas times the bytes), so that a replay of --ft-record in one process is bitwise the run")
	fs.StringVar(&f.ftReplay, "ft-replay", "", "--fault-tolerant: replay this --ft-record in one process (each step "+
		"its participants' batches, summed in order) and write --summary with its param_digest")
}

// ftOnly are the flags that do nothing without --fault-tolerant.
var ftOnly = []string{"min-replicas", "lighthouse", "ft-timeout", "ft-join-timeout", "ft-heartbeat-timeout",
	"ft-record", "ft-ordered-sum", "ft-replay"}

// ftRefused are the flags a fault-tolerant run cannot take yet, and why.
var ftRefused = map[string]string{
	"checkpoint":             "a fault-tolerant run recovers from its peers; checkpoints with it are not built",
	"resume":                 "a fault-tolerant run recovers from its peers; checkpoints with it are not built",
	"zero":                   "sharded optimizer state would have to be recovered shard by shard; not built",
	"diloco-fragments":       "Streaming DiLoCo's fragments as transactions are not built",
	"diloco-delay":           "Streaming DiLoCo's delay as a transaction is not built",
	"diloco-alpha":           "Streaming DiLoCo's mixing as a transaction is not built",
	"diloco-quantize":        "quantised pseudo-gradients as a transaction are not built",
	"grad-accum":             "accumulation across a discarded step is not built",
	"eval-every":             "held-out evaluation runs at the end of a fault-tolerant run only",
	"check-replicas-every":   "the launcher compares the replicas' parameter digests at the end instead",
	"timeline":               "one trace per replica incarnation is not built",
	"nnodes":                 "start replicas on other machines with --fault-tolerant --lighthouse ADDR instead",
	"metrics-addr":           "one address for several replicas; not built",
	"debug-addr":             "one address for several replicas; not built",
	"comm-hook":              "the replicas' gradients are averaged by the fault-tolerant manager",
	"find-unused-parameters": "every parameter is averaged by the fault-tolerant manager",
}

// validateFT checks the --fault-tolerant flags.
func (c config) validateFT() error {
	if !c.faultTolerant {
		for _, f := range ftOnly {
			if c.given(f) {
				return usagef("--%s does nothing without --fault-tolerant", f)
			}
		}
		return nil
	}
	for f, why := range ftRefused {
		if c.given(f) {
			return usagef("--fault-tolerant with --%s: %s", f, why)
		}
	}
	switch {
	case c.backend != "tcp":
		return usagef("--fault-tolerant needs --backend tcp: replicas are processes whose groups are rebuilt")
	case c.engine != "gorgonia":
		return usagef("--fault-tolerant with --engine %s: only the Gorgonia engine is built", c.engine)
	case c.onNonFinite == "skip":
		return usagef("--fault-tolerant with --on-nonfinite skip: a skipped step and a discarded one are not told apart")
	case c.ftMinReplicas < 1:
		return usagef("--min-replicas %d: at least 1", c.ftMinReplicas)
	case c.syncEvery > 0 && c.steps%c.syncEvery != 0:
		return usagef("--fault-tolerant --diloco-sync-every %d: --steps %d must be a multiple of it (a round is the "+
			"transaction)", c.syncEvery, c.steps)
	case c.ftTimeout <= 0 || c.ftJoin < 0 || c.ftHeartbeat <= 0:
		return usagef("--ft-timeout and --ft-heartbeat-timeout must be positive, --ft-join-timeout not negative")
	}
	return nil
}
