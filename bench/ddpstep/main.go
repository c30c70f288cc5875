// Command ddpstep measures one training step of a 784-512-512-512-10 MLP
// (float32, relu, mean softmax cross-entropy, batch 64 per rank) with and
// without DDP, and how much of DDP's communication hides behind backward:
//
//	go run ./bench/ddpstep                       # 2 TCP worker processes on loopback
//	go run ./bench/ddpstep --backend local       # 2 goroutine ranks in this process
//	go run ./bench/ddpstep --nproc 4 --steps 100 --format csv
//
// Every rank builds two copies of the model from the same values: a plain
// one and a DDP replica (ddp.Wrap, default buckets: 25 MiB cap, 1 MiB
// first bucket). It runs them alternately, one plain step then one DDP
// step, warmup+steps times, so drift in the machine's speed moves both.
// Rank 0 prints the bucket plan after the rebuild and its figures.
//
// # Definitions
//
// All instants are read on one rank's monotonic clock.
//
//   - Step without DDP: gorgonia's RunAll (forward and backward) of the
//     plain model, the solver's Step and the machine's Reset. Every rank
//     runs its plain model at the same time, so both figures are taken
//     with the same number of busy ranks on the machine.
//   - Step with DDP: DDP.RunAll (Prepare, RunAll with gradient hooks,
//     Finalize), the solver's Step and Reset.
//   - Before RunAll: from the DDP step's start to the tape's start, that
//     is, Prepare.
//   - Forward, backward: RunAll split at the start of backward, which a
//     mark on the loss reports (the first node of backward to run).
//   - Wait after RunAll: from the tape's end to DDP.RunAll's return: the
//     exposed part of communication plus Finalize's copies back.
//   - Solver step and Reset: from the end of RunAll (DDP.RunAll for the
//     replica) to the end of the step.
//   - A bucket's communication interval: from the moment the reducer
//     calls the comm hook (commhook.Allreduce, which divides the bucket by
//     the world size and starts the allreduce) to the moment its Work is
//     done: the earliest of several looks at it, each of which can only
//     be late (Note [observing done] in timing.go).
//   - Communication time: the length of the union of the buckets'
//     intervals, so that buckets in flight together count once.
//   - Hidden communication: the part of that union inside the interval
//     of RunAll (the tape's start to its end).
//   - Overlap: hidden communication / communication time, summed over the
//     timed steps. 1 means every byte moved while backward was running.
//   - DDP step / step without DDP: the median over steps of each DDP
//     step's time over the plain step run just before it.
//
// Times are medians over the timed steps, so the parts of a step need not
// add up to its median. Each bucket's interval is also shown from the
// start of backward, with the hidden fraction of each. On a machine with
// fewer cores than ranks need, communication that is hidden still takes
// CPU from backward: compare the two backward times.
//
// --hook noop times DDP without communication: the reducer's own cost in
// the step. --hook sync allreduces one float32 per bucket instead of the
// bucket: the ranks then wait for each other exactly as with a real hook,
// and the ratio is the floor that synchronization alone sets.
//
// --gradient-as-bucket-view wraps the replica with GradientAsBucketView.
// --compare-bucket-view times a third model, a replica with bucket views,
// next to the copying replica in every round (the two take turns going
// first after the plain step), so one run reports both
// side by side: each one's step, the median of the view step over the
// copying step of the same round, and the gradient bytes each copies per
// step (the reducer's copies into and out of the buckets, and the hooks'
// one copy of each fresh Gorgonia gradient into its bucket view).
//
// Communication intervals include the time a rank waits for a slower
// peer to reach the same collective.
//
// An untimed barrier starts every step, plain or DDP, so that each starts
// with the ranks together, as every step of a run of DDP steps does.
// --no-align leaves it out; a DDP step then also waits out the ranks'
// drift over the unsynchronized plain step before it.
//
// --cpuprofile PATH makes each TCP worker write a CPU profile of its run
// (at 1 kHz) to PATH.rank<N>, for go tool pprof.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"

	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/local"
)

type options struct {
	backend string
	nproc   int
	format  string
	cfg     config
	job     launch.Loopback // --timeout, --link-bytes-per-sec, --shm
	cpuProf string
}

func main() { cli.Main("ddpstep", run) }

func parse(args []string, stderr io.Writer) (options, error) {
	fs := cli.FlagSet("ddpstep", stderr)
	o := options{cfg: config{sizes: []int{784, 512, 512, 512, 10}}}
	fs.StringVar(&o.backend, "backend", "tcp", "process group backend: local or tcp")
	fs.IntVar(&o.nproc, "nproc", 2, "number of ranks")
	fs.IntVar(&o.cfg.rows, "batch", 64, "batch per rank")
	fs.IntVar(&o.cfg.steps, "steps", 50, "timed steps of each model")
	fs.IntVar(&o.cfg.warmup, "warmup", 5,
		"untimed steps of each model first (at least 2: the buckets are rebuilt after the first)")
	fs.StringVar(&o.cfg.hook, "hook", "allreduce", "comm hook: allreduce, fp16, bf16, powersgd, batched-powersgd, noop "+
		"to time DDP without communication, or sync to time DDP with one float32 allreduced per bucket (the ranks' "+
		"synchronization alone)")
	fs.IntVar(&o.cfg.powersgdRank, "powersgd-rank", 1, "powersgd hooks: matrix_approximation_rank")
	fs.IntVar(&o.cfg.powersgdStartIter, "powersgd-start-iter", 2, "powersgd hooks: plain allreduce before this "+
		"iteration (at least 2; keep it within --warmup to time compressed steps)")
	fs.IntVar(&o.cfg.bucketCapBytes, "bucket-cap-bytes", 0, "bucket cap (0: the reducer's default, 25 MiB)")
	fs.IntVar(&o.cfg.firstBucketBytes, "first-bucket-bytes", 0, "first bucket's cap (0: the reducer's default, 1 MiB)")
	fs.BoolVar(&o.cfg.bucketView, "gradient-as-bucket-view", false,
		"the DDP replica uses GradientAsBucketView: gradients live in the buckets")
	fs.BoolVar(&o.cfg.compareView, "compare-bucket-view", false,
		"also time a DDP replica with GradientAsBucketView, alternately with the copying one, and report both side by side")
	fs.BoolVar(&o.cfg.noAlign, "no-align", false,
		"no untimed barrier before each step: DDP steps then also wait out the ranks' drift over the plain step before them")
	fs.StringVar(&o.format, "format", "table", "output: table or csv")
	fs.StringVar(&o.cpuProf, "cpuprofile", "",
		"tcp only: each worker writes a CPU profile of its run to this path with .rank<N> appended")
	o.job.AddFlags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.backend != "local" && o.backend != "tcp":
		return o, cli.Usage(fmt.Errorf("--backend %q: want local or tcp", o.backend))
	case o.nproc < 1:
		return o, cli.Usage(fmt.Errorf("--nproc %d: want at least 1", o.nproc))
	case o.cfg.rows < 1 || o.cfg.steps < 1:
		return o, cli.Usage(fmt.Errorf("--batch %d, --steps %d: want at least 1", o.cfg.rows, o.cfg.steps))
	case o.cfg.warmup < 2:
		return o, cli.Usage(fmt.Errorf("--warmup %d: want at least 2, to time the buckets after the rebuild", o.cfg.warmup))
	case o.cfg.bucketView && o.cfg.compareView:
		return o, cli.Usage(
			fmt.Errorf("--gradient-as-bucket-view and --compare-bucket-view: choose one (the comparison runs both)"))
	case o.format != "table" && o.format != "csv":
		return o, cli.Usage(fmt.Errorf("--format %q: want table or csv", o.format))
	}
	if _, err := newHook(o.cfg); err != nil { // hooks.go
		return o, cli.Usage(err)
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case o.backend == "local":
		return runLocal(ctx, o, stdout)
	case os.Getenv(launch.LoopbackWorkerEnv) == "1":
		return runWorker(ctx, o, stdout)
	default:
		return runLauncher(ctx, o, args, stdout, stderr)
	}
}

// runLocal runs nproc goroutine ranks in this process.
func runLocal(ctx context.Context, o options, stdout io.Writer) error {
	groups, err := local.New(o.nproc, local.Options{Timeout: o.job.Timeout})
	if err != nil {
		return err
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	results := make([]rankResult, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() { results[r], errs[r] = measure(ctx, g, o.cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	report(stdout, o, results[0])
	return nil
}

// runLauncher starts nproc workers of this program on loopback, with a
// fresh job secret, and waits for them; rank 0's output is ours.
func runLauncher(ctx context.Context, o options, args []string, stdout, stderr io.Writer) error {
	return o.job.Launch(ctx, o.nproc, args, stdout, stderr)
}

// runWorker is one TCP rank: rendezvous through the TCPStore that rank 0
// hosts, then measure.
func runWorker(ctx context.Context, o options, stdout io.Writer) error {
	cfg, err := env.FromLookup(os.LookupEnv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.job.Timeout)
	defer cancel()
	m, err := o.job.Join(ctx, cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	g := m
	if o.cpuProf != "" {
		f, err := os.Create(fmt.Sprintf("%s.rank%d", o.cpuProf, g.Rank()))
		if err != nil {
			return err
		}
		defer f.Close()
		runtime.SetCPUProfileRate(1000) // ten times pprof's default: a step is 20 ms
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := measure(ctx, g, o.cfg)
	if err != nil {
		return err
	}
	if g.Rank() == 0 {
		report(stdout, o, res)
	}
	return nil
}
