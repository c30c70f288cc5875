package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/optim"
)

// config is every flag of ddp-train.
type config struct {
	nproc   int
	backend string

	engine     string // --engine: gorgonia or gomlx (gomlx.go)
	gomlxFlags        // --dropout, --mixed-precision, --reduce-dtype (gomlx.go)
	model      string
	hidden     []int
	activation string

	data, labels string
	classes      int
	samples      int // size of the built-in synthetic set

	shuffle   bool
	batchSize int
	steps     int
	epochs    int
	seed      int64

	optimizer string
	lr        float64
	dtype     string

	bucketCapMB   float64
	firstBucketMB float64
	commHook      string
	findUnused    bool
	staticGraph   bool
	bucketView    bool
	gradAccum     int
	timeout       time.Duration
	debugColls    bool   // --debug-collectives: fingerprint check before every collective
	flightDir     string // --flight-dir: where ranks dump their flight recorders (flight.go)
	shm           bool   // --shm: tcp backend moves same-host collective data through shared memory

	powersgdRank      int // --powersgd-rank: matrix_approximation_rank
	powersgdStartIter int // --powersgd-start-iter: start_powerSGD_iter

	initDir, saveDir     string
	checkpointDir        string
	checkpointEvery      int
	checkReplicas        int
	onNonFinite          string
	findOrigin           bool // --find-nonfinite-origin: reducer.Options.FindNonFiniteOrigin
	overwriteCheckpoints bool
	resumeAllow          string
	// this process is a worker that ddp-train's own launcher started (set by run, not a flag)
	ownLauncher    bool
	command        []string          // a program to launch instead of training: the arguments after the flags
	setFlags       []string          // the flags the command line set, by name
	flagValues     map[string]string // every flag's value, by name, that the ranks compare (agree.go)
	checkpointKeep int               // --checkpoint-keep: checkpoints to keep (checkpoint.Options.Keep)
	resume         bool

	logFormat   string
	logLevel    string
	logEvery    int
	bar         progressSink // where rank 0's bar goes; nil: "train" lines (set by run, not a flag; terminal.go)
	summary     string
	metricsAddr string
	debugAddr   string // --debug-addr: /debug/* on an address of its own (debughttp.go)
	listenAddr  string
	timeline    string // --timeline DIR: a Chrome trace per rank

	elastic   // --max-restarts, --restart-backoff; signal handling (elastic.go)
	nodeFlags // --nnodes, --node-rank, --master-addr, --master-port (nodes.go)
	limits    // --oversubscribe; bounds on every number and address (limits.go)

	stragglerFlags // --straggler-window, -share, -margin (straggler.go)
	evalFlags      // --eval-data, --eval-labels, --eval-every; `ddp-train eval` (eval.go)
	optimFlags     // --momentum … --betas, --lr-schedule …, --clip-grad-norm/-value (optflags.go)
	dilocoFlags    // --diloco-sync-every, --outer-lr … (diloco.go)
	ftFlags        // --fault-tolerant, --min-replicas … (ftflags.go)
}

// usageError is a bad flag or bad input: ddp-train exits 2 on it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := cli.FlagSet("ddp-train", stderr)
	var info infoFlags // --help's synopsis, --version (usage.go)
	info.register(fs)
	var hidden string
	fs.IntVar(&c.nproc, "nproc", 2, "number of worker processes (or goroutine ranks with --backend local)")
	fs.StringVar(&c.backend, "backend", "tcp", "process group backend: tcp (worker processes on loopback), local "+
		"(goroutines in one process), nccl (worker processes, one GPU each: GPU LOCAL_RANK; GODDP_NCCL_LIBRARY names "+
		"libnccl.so.2) or mpi (under mpirun -np N; needs a binary built with -tags mpi)")
	c.gomlxFlags.register(fs, &c.engine) // gomlx.go: --engine and what only --engine gomlx acts on
	c.registerModelFlags(fs, &hidden)
	c.optimFlags.register(fs)  // optflags.go
	c.dilocoFlags.register(fs) // diloco.go
	c.ftFlags.register(fs)     // ftflags.go
	fs.Float64Var(&c.bucketCapMB, "bucket-cap-mb", 25, "bucket size cap in MiB (DDP's bucket_cap_mb)")
	fs.Float64Var(&c.firstBucketMB, "first-bucket-mb", 1, "first bucket size cap in MiB")
	fs.StringVar(&c.commHook, "comm-hook", "allreduce",
		"comm hook: allreduce, fp16, bf16, powersgd, batched-powersgd, noop, adasum or hierarchical (docs/comm-hooks.md)")
	fs.IntVar(&c.powersgdRank, "powersgd-rank", 1,
		"powersgd hooks: rank of the low-rank approximation (matrix_approximation_rank)")
	fs.IntVar(&c.powersgdStartIter, "powersgd-start-iter", 1000,
		"powersgd hooks: plain allreduce before this iteration (start_powerSGD_iter; at least 2)")
	fs.BoolVar(&c.findUnused, "find-unused-parameters", false, "allow parameters that do not reach the loss")
	fs.BoolVar(&c.staticGraph, "static-graph", false, "DDP's static_graph")
	fs.BoolVar(&c.bucketView, "gradient-as-bucket-view", false, "DDP's gradient_as_bucket_view: gradients become views "+
		"of the bucket buffers, saving the copy back after each allreduce (docs/reducer.md)")
	fs.IntVar(&c.gradAccum, "grad-accum", 1, "micro-batches per optimizer step; communication only on the last")
	fs.BoolVar(&c.shm, "shm", true, "tcp backend: ranks on one host move AllReduce, Broadcast, AllGather, "+
		"ReduceScatter, Reduce, Gather, Scatter and AllToAll data through shared memory (false: loopback TCP only)")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute,
		"process group timeout: a stalled or dead peer fails the run after this")
	fs.BoolVar(&c.debugColls, "debug-collectives", false, "check before every collective that all ranks issue the same "+
		"one (op, dtype, sizes, root), as TORCH_DISTRIBUTED_DEBUG=DETAIL; a mismatch fails every rank with both signatures "+
		"instead of hanging; costs one small allgather per collective")
	fs.StringVar(&c.onNonFinite, "on-nonfinite", "fail", "when a loss or the averaged gradients turn NaN or infinite: "+
		"fail (exit 3, nothing of that step saved) or skip (skip that update on every rank, as loss scaling does, and "+
		"count it)")
	fs.BoolVar(&c.findOrigin, "find-nonfinite-origin", true, "check each rank's gradients for NaN and infinities before "+
		"every bucket's allreduce, send such values as zeros so they never reach the other ranks, and name the ranks, "+
		"step, bucket and parameters where they began (--on-nonfinite then decides); costs a scan of the gradients and one "+
		"allreduce of one word per step")
	fs.IntVar(&c.checkReplicas, "check-replicas-every", 10, "every N steps check that every rank holds bitwise the same "+
		"parameters (a digest per parameter, carried by the step's stop-signal allreduce); a mismatch fails every rank "+
		"naming the first differing parameter (0: off)")
	fs.StringVar(&c.logFormat, "log-format", "console", "log format: console or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error (debug adds the reducer's "+
		"sampled per-step statistics, \"DDP runtime stats\")")
	fs.IntVar(&c.logEvery, "log-every", 50,
		"log a line every N steps when not on a terminal; on one, the bar's figures are renewed every N steps")
	fs.StringVar(&c.listenAddr, "listen-addr", "",
		"tcp backend: address to listen on for peers (default: loopback for single-machine jobs, else all interfaces)")
	c.registerOutputFlags(fs)
	c.elastic.register(fs)
	c.nodeFlags.register(fs)
	c.limits.register(fs)
	c.stragglerFlags.register(fs)
	c.evalFlags.register(fs)
	if err := cli.Parse(fs, args); err != nil { // a typo: one line and a hint, not the usage
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, usageError{err}
	}
	if err := info.done(); err != nil {
		return c, err
	}
	c.command = fs.Args() // ddp-train [flags] PROGRAM [ARGS]: launch it (Note [launching a program])
	fs.Visit(func(f *flag.Flag) { c.setFlags = append(c.setFlags, f.Name) })
	c.resolveSteps() // --epochs without --steps: Note [no flag is ignored] (flagrules.go)
	c.flagValues = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { c.flagValues[f.Name] = f.Value.String() }) // Note [every rank runs the same job]
	h, err := cli.ParseInts(hidden)
	if err != nil {
		return c, usagef("--hidden %q: %v", hidden, err)
	}
	c.hidden = h
	return c, c.validate()
}

// registerModelFlags registers the flags of the model, its data and its
// optimizer; --hidden is parsed by parseFlags into c.hidden.
func (c *config) registerModelFlags(fs *flag.FlagSet, hidden *string) {
	fs.StringVar(&c.model, "model", "mlp", "model: mlp or cnn")
	fs.StringVar(hidden, "hidden", "128,128", "mlp hidden layer sizes, comma-separated")
	fs.StringVar(&c.activation, "activation", "relu", "activation: relu or tanh")
	fs.StringVar(&c.data, "data", "",
		"features: a .npy file [N,D] (float32/float64) or MNIST idx3-ubyte images; empty for the built-in synthetic set")
	fs.StringVar(&c.labels, "labels", "", "labels: an integer .npy file [N] or MNIST idx1-ubyte labels")
	fs.IntVar(&c.classes, "classes", 0, "number of classes (0: largest label + 1)")
	fs.IntVar(&c.samples, "samples", 8192, "size of the built-in synthetic dataset")
	fs.BoolVar(&c.shuffle, "shuffle", true, "shuffle every epoch (seeded by --seed and the epoch), as DistributedSampler")
	fs.IntVar(&c.batchSize, "batch-size", 32, "samples per rank per step")
	fs.IntVar(&c.steps, "steps", 500, "optimizer steps to run (the default only without --epochs; 0: use --epochs; both "+
		"0: no training, e.g. --init A --save B)")
	fs.IntVar(&c.epochs, "epochs", 0,
		"epochs to run instead of --steps (--epochs N alone trains N epochs; with --steps, one of them must be 0)")
	fs.Int64Var(&c.seed, "seed", 1, "seed for initial weights, data and shuffling")
	fs.StringVar(&c.optimizer, "optimizer", "sgd", "optimizer: sgd, momentum (sgd with momentum 0.9), adam or adamw "+
		"(docs/optimizers.md)")
	fs.Float64Var(&c.lr, "lr", 0.1, "learning rate")
	fs.StringVar(&c.dtype, "dtype", "float32", "parameter dtype: float32 or float64")
}

// registerOutputFlags registers the flags of what a run reads from and
// writes to disk, and where it serves metrics and debug endpoints.
func (c *config) registerOutputFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.initDir, "init", "", "load initial parameters from DIR (one .npy per parameter)")
	fs.StringVar(&c.saveDir, "save", "", "write the final parameters to DIR (rank 0): one <name>.npy per parameter, and "+
		"DIR/.ddp-train-save listing them; nothing else in DIR is touched")
	fs.StringVar(&c.checkpointDir, "checkpoint", "", "checkpoint directory: DIR/step-NNNNNNNNN/ per checkpoint, "+
		"DIR/latest naming the newest, DIR/.ddp-train.lock; nothing else in DIR is touched")
	fs.IntVar(&c.checkpointEvery, "checkpoint-every", 0, "save a checkpoint every N steps (needs --checkpoint; 0: "+
		"--checkpoint gets one checkpoint, at the end of the run, or when a signal stops it)")
	fs.IntVar(&c.checkpointKeep, "checkpoint-keep", 1, "keep the last K checkpoints; --resume falls back past a damaged "+
		"one to the newest intact one, with a warning (with 1, a damaged one is an error)")
	fs.BoolVar(&c.overwriteCheckpoints, "overwrite-checkpoints", false, "start over in a --checkpoint directory that "+
		"holds another run's checkpoints, deleting them (without it such a directory is refused)")
	fs.StringVar(&c.resumeAllow, "resume-allow-changes", "", "with --resume, settings the run may change from the "+
		"checkpoint's, comma-separated (world_size, seed, batch_size, grad_accum, optimizer, lr, comm_hook, "+
		"powersgd_start_iter, model, shuffle, data); any other change is refused")
	fs.BoolVar(&c.resume, "resume", false, "continue from --checkpoint (every file is verified against its checksum; a "+
		"damaged checkpoint exits 2 naming the file)")
	fs.StringVar(&c.summary, "summary", "", "write a JSON summary of the run to FILE")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on host:port (worker i on port+i), with "+
		"/healthz and /readyz; and /debug/* (pprof, state, flight) to loopback clients only, unless --debug-addr")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "serve /debug/pprof/, /debug/state and /debug/flight on host:port "+
		"(worker i on port+i) to any client that reaches it (default: only to loopback clients of --metrics-addr)")
	fs.StringVar(&c.flightDir, "flight-dir", "", "write each rank's flight recorder (its last 2000 collectives, torch's "+
		"JSON layout) to DIR/nccl_trace_rank_N when a collective fails and on SIGUSR1; read them with 'ddp-train fr-trace "+
		"DIR' (default: CHECKPOINT/flight with --checkpoint; otherwise a failure dumps nothing and SIGUSR1 dumps to the "+
		"temporary directory)")
	fs.StringVar(&c.timeline, "timeline", "",
		"write a Chrome trace of every step to DIR/rank-N.json, one per rank (open in ui.perfetto.dev)")
}

// validate checks the flags in a fixed order and reports the first problem,
// so that a command line with several mistakes always gets the same message.
func (c config) validate() error {
	checks := []func() error{
		c.validateRun,
		c.validateRecovery,
		c.validateTuning,
		func() error { return c.elastic.validate(c.backend) },
		func() error { return c.nodeFlags.validate(c) },
		c.validateOptimizer,
		c.validateHook,
		c.validateDiLoCo,
		c.validateFT, // ftflags.go
		c.validateEngine,
		func() error { return validateLimits(c) },
		c.validateOptim,     // optflags.go
		c.validateDebugAddr, // debughttp.go
		c.stragglerFlags.validate,
		c.validateEval,    // eval.go
		c.validateFlagUse, // flagrules.go: Note [no flag is ignored]
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateRun checks what the run is: backend, sizes, dtype, log format and
// input files.
func (c config) validateRun() error {
	switch {
	case c.backend != "tcp" && c.backend != "local" && c.backend != "nccl" && c.backend != "mpi":
		return usagef("--backend %q: want tcp, local, nccl or mpi", c.backend)
	case c.nproc < 1:
		return usagef("--nproc %d: want at least 1", c.nproc)
	case c.batchSize < 1:
		return usagef("--batch-size %d: want at least 1", c.batchSize)
	case c.steps < 0 || c.epochs < 0:
		return usagef("--steps and --epochs must not be negative")
	case c.gradAccum < 1:
		return usagef("--grad-accum %d: want at least 1", c.gradAccum)
	case c.lr <= 0:
		return usagef("--lr %g: want a positive learning rate", c.lr)
	case c.dtype != "float32" && c.dtype != "float64":
		return usagef("--dtype %q: want float32 or float64", c.dtype)
	case c.logFormat != "console" && c.logFormat != "json":
		return usagef("--log-format %q: want console or json", c.logFormat)
	case !slices.Contains([]string{"debug", "info", "warn", "error"}, c.logLevel):
		return usagef("--log-level %q: want debug, info, warn or error", c.logLevel)
	case (c.data == "") != (c.labels == ""):
		return usagef("--data and --labels go together")
	}
	return nil
}

// validateRecovery checks how a run guards and recovers itself:
// checkpoints, resume, non-finite gradients and replica checks.
func (c config) validateRecovery() error {
	switch {
	case c.checkpointEvery < 0 || (c.checkpointEvery > 0 && c.checkpointDir == ""):
		return usagef("--checkpoint-every needs --checkpoint DIR")
	case c.resumeAllow != "" && !c.resume:
		return usagef("--resume-allow-changes needs --resume")
	case knownFields(c.resumeAllow) != nil:
		return knownFields(c.resumeAllow)
	case c.onNonFinite != "fail" && c.onNonFinite != "skip":
		return usagef("--on-nonfinite %q: want fail or skip", c.onNonFinite)
	case c.checkReplicas < 0:
		return usagef("--check-replicas-every %d: want 0 (off) or a positive number of steps", c.checkReplicas)
	case c.checkpointKeep < 1:
		return usagef("--checkpoint-keep %d: want at least 1", c.checkpointKeep)
	case c.checkpointKeep > 1 && c.checkpointDir == "":
		return usagef("--checkpoint-keep needs --checkpoint DIR")
	case c.resume && c.checkpointDir == "":
		return usagef("--resume needs --checkpoint DIR")
	}
	return nil
}

// validateTuning checks the knobs that change speed and output, not results.
func (c config) validateTuning() error {
	switch {
	case c.bucketCapMB <= 0 || c.firstBucketMB <= 0:
		return usagef("--bucket-cap-mb and --first-bucket-mb must be positive")
	case c.timeout < minTimeout:
		return usagef("--timeout %v: want at least %v, and at most %v (a week): it bounds the rendezvous and every "+
			"collective, so a shorter one fails healthy runs", c.timeout, minTimeout, maxTimeout)
	case c.logEvery < 1:
		return usagef("--log-every %d: want at least 1", c.logEvery)
	case c.samples < 1:
		return usagef("--samples %d: want at least 1", c.samples)
	}
	return nil
}

func (c config) validateOptimizer() error {
	if !slices.Contains(optim.Names(), c.optimizer) {
		return usagef("--optimizer %q: want one of %s", c.optimizer, strings.Join(optim.Names(), ", "))
	}
	return nil
}

func (c config) validateHook() error {
	if _, err := hookByName(c); err != nil {
		return usageError{err}
	}
	if c.zero && c.commHook == "noop" {
		// optim.Zero needs every rank's step to see the same averaged
		// gradients; noop leaves each rank its own, so each parameter would
		// take its owner's alone (TestZeroRefusesNoop).
		return usagef("--zero with --comm-hook noop: noop leaves each rank its own gradients, so with --zero each " +
			"parameter would be stepped with its owner rank's alone; use a hook that averages, or leave out --zero")
	}
	return nil
}
