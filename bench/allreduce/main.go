// Command allreduce measures the collectives of a goddp backend the way
// nccl-tests does, allreduce by default:
//
//	go run ./bench/allreduce --backend tcp --nproc 2 --sizes 4096,1048576,67108864 --dtype float32
//	go run ./bench/allreduce --backend tcp --nproc 2 --op alltoall --sizes 1048576
//	go run ./bench/allreduce --backend local --nproc 4 --op all --format table
//	go build -tags mpi -o allreduce ./bench/allreduce && mpirun -np 2 ./allreduce --backend mpi
//
// --op is allreduce, allgather, reducescatter, alltoall, broadcast,
// reduce, gather, scatter, sendrecv or barrier, a comma-separated list of
// them, or all (which skips, with a note, the ops the backend lacks). A
// barrier moves nothing: it is timed once, as a row of 0 bytes, whatever
// --sizes says. The CSV
// output is
//
//	bytes,count,type,op,redop,root,time_us,algbw_GBps,busbw_GBps
//
// and --format table prints nccl-tests' aligned columns instead. As in
// nccl-tests, a requested size S gives each op its count and size:
// allreduce, broadcast, reduce and sendrecv move count = S/e elements
// (e the element size); allgather, reducescatter, alltoall, gather and
// scatter have a per-rank chunk of count = S/e/n elements, and their
// size is count·n·e, the larger of a rank's buffers. algbw = size/time
// and busbw = algbw × factor, with nccl-tests' factors (src/*.cu GetBw):
//
//	allreduce                                      2(n-1)/n
//	allgather, reducescatter, alltoall,
//	gather, scatter                                (n-1)/n
//	broadcast, reduce, sendrecv                    1
//
// sendrecv is nccl-tests' ring: each rank sends to rank+1 and receives
// from rank-1 at once. Rooted ops use --root. For tcp the command starts
// nproc worker processes on loopback with a fresh job secret, the way
// ddp-train does; for local it runs nproc goroutine ranks in this
// process, and reports allreduce against the memory-bandwidth bound.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/local"
)

type options struct {
	backend      string
	compareLocal bool // tcp: rank 0 also measures pg/local in the same job
	nproc        int
	cfg          config
	job          launch.Loopback // --timeout, --link-bytes-per-sec, --shm
}

func main() { cli.Main("allreduce", run) }

func parse(args []string, stderr io.Writer) (options, error) {
	fs := cli.FlagSet("allreduce", stderr)
	var o options
	var sizes, dtype, ops, format string
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: allreduce [flags]\n\n%s\nflags:\n", helpText)
		cli.PrintDefaults(fs)
	}
	fs.StringVar(&ops, "op", "allreduce", "collective to time: all, or a comma-separated list of "+opNames())
	fs.StringVar(&format, "format", "csv", "output: csv, or table (nccl-tests' columns)")
	fs.IntVar(&o.cfg.root, "root", 0, "root rank of broadcast, reduce, gather and scatter")
	fs.StringVar(&o.backend, "backend", "tcp", "process group backend: local, tcp, nccl (one GPU per worker: GPU "+
		"LOCAL_RANK, host tensors staged) or mpi (under mpirun -np N, built with -tags mpi; also measures tcp in the same "+
		"job and prints the ratio)")
	fs.IntVar(&o.nproc, "nproc", 2, "number of ranks")
	fs.BoolVar(&o.compareLocal, "compare-local", false, "tcp only: once the job is measured, rank 0 measures the same "+
		"on goroutine ranks of the in-process backend (the others wait) and prints tcp's busbw over local's, with the "+
		"memory-bandwidth bound, on stderr")
	fs.StringVar(&sizes, "sizes", "4096,1048576,67108864",
		"comma-separated sizes in bytes, as nccl-tests' -b/-e (see above for each op's buffers)")
	fs.StringVar(&dtype, "dtype", "float32", "element type")
	fs.IntVar(&o.cfg.iters, "iters", 0, "timed iterations per size (0 picks by size)")
	fs.IntVar(&o.cfg.warmup, "warmup", 3, "untimed iterations per size")
	fs.BoolVar(&o.cfg.heapBuffers, "heap-buffers", false, "allreduce on the heap; by default on memory the group hands "+
		"out where it does (pg/tcp: its shared-memory arena, which the ranks of a host read in place), as the reducer "+
		"keeps its buckets")
	o.job.AddFlags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.backend != "local" && o.backend != "tcp" && o.backend != "nccl" && o.backend != "mpi" {
		return o, cli.Usage(fmt.Errorf("--backend %q: want local, tcp, nccl or mpi", o.backend))
	}
	if o.compareLocal && o.backend != "tcp" {
		return o, cli.Usage(fmt.Errorf("--compare-local is for --backend tcp, not %q", o.backend))
	}
	if o.nproc < 1 {
		return o, cli.Usage(fmt.Errorf("--nproc %d: want at least 1", o.nproc))
	}
	if o.cfg.ops, err = lookupOps(ops); err != nil {
		return o, cli.Usage(err)
	}
	o.cfg.all = ops == "all"
	switch format {
	case "csv":
	case "table":
		o.cfg.table = true
	default:
		return o, cli.Usage(fmt.Errorf("--format %q: want csv or table", format))
	}
	if o.cfg.root < 0 || o.cfg.root >= o.nproc {
		return o, cli.Usage(fmt.Errorf("--root %d: want a rank in [0, %d)", o.cfg.root, o.nproc))
	}
	d, err := pg.ParseDtype(dtype)
	if err != nil {
		return o, cli.Usage(err)
	}
	o.cfg.dtype = d
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return o, cli.Usage(fmt.Errorf("--sizes: %q is not a byte count", s))
		}
		o.cfg.sizes = append(o.cfg.sizes, n)
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
		return runLocal(ctx, o, stdout, stderr)
	case o.backend == "mpi": // mpi.go: MPI knows the ranks
		return runMPI(ctx, o, stdout)
	case os.Getenv(launch.LoopbackWorkerEnv) == "1":
		return runWorker(ctx, o, stdout)
	default:
		return runLauncher(ctx, o, args, stdout, stderr)
	}
}

func runLocal(ctx context.Context, o options, stdout, stderr io.Writer) error {
	rows, err := measureLocal(ctx, o, stdout)
	if err == nil {
		reportBound(stderr, o.nproc, rows)
	}
	return err
}

// measureLocal measures o's ops on o.nproc goroutine ranks of pg/local,
// printing rank 0's rows to stdout, and returns them.
func measureLocal(ctx context.Context, o options, stdout io.Writer) ([]result, error) {
	groups, err := local.New(o.nproc, local.Options{Timeout: o.job.Timeout})
	if err != nil {
		return nil, err
	}
	errs := make(chan error, len(groups))
	var rows []result
	for _, g := range groups {
		go func() {
			r, err := measure(ctx, g, o.cfg, stdout)
			if g.Rank() == 0 {
				rows = r
			}
			errs <- err
		}()
	}
	var first error
	for range groups {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	for _, g := range groups {
		g.Close()
	}
	return rows, first
}

func runLauncher(ctx context.Context, o options, args []string, stdout, stderr io.Writer) error {
	return o.job.Launch(ctx, o.nproc, args, stdout, stderr)
}

func runWorker(ctx context.Context, o options, stdout io.Writer) error {
	cfg, err := env.FromLookup(os.LookupEnv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.job.Timeout)
	defer cancel()
	if o.backend == "nccl" {
		return runNCCLWorker(ctx, o, cfg)
	}
	m, err := o.job.Join(ctx, cfg)
	if err != nil {
		return err
	}
	defer m.Close()
	rows, err := measure(ctx, m, o.cfg, stdout)
	if err != nil || !o.compareLocal {
		return err
	}
	if m.Rank() == 0 {
		err = compareLocal(ctx, o, rows, os.Stderr)
	}
	// The other workers wait, asleep, while rank 0 measures pg/local.
	if berr := m.Barrier(ctx).Wait(ctx); err == nil {
		err = berr
	}
	return err
}

// compareLocal is --compare-local, on rank 0 of a tcp job once the job's
// own measurement is done: the same ops on as many goroutine ranks of
// pg/local in this process, then, per size, tcp's busbw over pg/local's
// and the memory-bandwidth bound beside both.
func compareLocal(ctx context.Context, o options, tcpRows []result, stderr io.Writer) error {
	localRows, err := measureLocal(ctx, o, io.Discard)
	if err != nil {
		return fmt.Errorf("--compare-local: %w", err)
	}
	for _, t := range tcpRows {
		for _, l := range localRows {
			if l.op.name == t.op.name && l.bytes == t.bytes && l.busbw() > 0 {
				fmt.Fprintf(stderr, "# %s bytes=%d tcp busbw=%.2f GB/s local busbw=%.2f GB/s tcp/local=%.2f\n",
					t.op.name, t.bytes, t.busbw(), l.busbw(), t.busbw()/l.busbw())
			}
		}
	}
	bmem := memoryBandwidth(64<<20, 8)
	fmt.Fprintf(stderr,
		"# memory bandwidth (parallel copy on %d cores): %.2f GB/s of traffic; the bound, for tcp, then for local:\n",
		runtime.GOMAXPROCS(0), bmem/1e9)
	reportBoundAt(stderr, o.nproc, tcpRows, bmem)
	reportBoundAt(stderr, o.nproc, localRows, bmem)
	return nil
}
