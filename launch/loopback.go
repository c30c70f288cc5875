package launch

import (
	"context"
	"flag"
	"io"
	"time"

	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/tcp"
)

// LoopbackWorkerEnv marks a process that Loopback.Launch started as one
// of the workers: the program checks it to take the worker's side.
const LoopbackWorkerEnv = "GODDP_BENCH_WORKER"

// Loopback is the job the benchmarks (bench/allreduce, bench/ddpstep) run
// over TCP: the benchmark itself started N times on this host, the copies
// joined over loopback. It holds what their flags set.
type Loopback struct {
	Timeout         time.Duration // the group's timeout
	LinkBytesPerSec int64         // each link's bandwidth cap; 0 is none
	SharedMemory    bool          // ranks move data through shared memory, not loopback TCP
}

// AddFlags defines --timeout, --link-bytes-per-sec and --shm on fs, with
// the defaults a benchmark wants: five minutes, no cap, shared memory.
func (l *Loopback) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&l.Timeout, "timeout", 5*time.Minute, "group timeout")
	fs.Int64Var(&l.LinkBytesPerSec, "link-bytes-per-sec", 0, "tcp only: cap each link's bandwidth (0 = unlimited)")
	fs.BoolVar(&l.SharedMemory, "shm", true, "tcp only: ranks on one host move AllReduce, Broadcast, AllGather, "+
		"ReduceScatter, Reduce, Gather, Scatter and AllToAll data through shared memory (false: loopback TCP only)")
}

// Launch starts n workers, copies of the running program with args, and
// waits for them (Self, with LoopbackWorkerEnv set).
func (l Loopback) Launch(ctx context.Context, n int, args []string, stdout, stderr io.Writer) error {
	return Self(ctx, n, args, LoopbackWorkerEnv+"=1", stdout, stderr)
}

// Join is a worker's side: it meets the others through the rendezvous
// that cfg (read from the environment Launch set) describes.
func (l Loopback) Join(ctx context.Context, cfg env.Config) (*dist.Group, error) {
	return dist.InitProcessGroup(ctx, dist.Options{Env: &cfg, Timeout: l.Timeout, TCP: tcp.Options{
		ListenAddr:      "127.0.0.1:0",
		LinkBytesPerSec: l.LinkBytesPerSec,
		NoSharedMemory:  !l.SharedMemory,
	}})
}
