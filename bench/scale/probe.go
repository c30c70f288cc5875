package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp"
)

// probeWorkerCmd is the hidden subcommand calibrate runs on each host: a
// rank that joins the group its launcher variables describe and times
// AllReduce at each size.
const probeWorkerCmd = "probe-worker"

// probeRow is one size's median time, as rank 0 prints it.
type probeRow struct {
	Bytes   int     `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

func runProbeWorker(args []string, stdout, stderr io.Writer) error {
	fs := cli.FlagSet("scale "+probeWorkerCmd, stderr)
	sizes := fs.String("sizes", "8,524288,2097152,8388608", "bytes per allreduce, comma-separated")
	budget := fs.Duration("budget", 2*time.Second, "time to spend per size (at least 3 iterations, at most 50)")
	shm := fs.Bool("shm", false, "ranks on one host move data through shared memory")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	ss, err := cli.ParseInts(*sizes)
	if err != nil {
		return cli.Usage(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, err := dist.InitProcessGroup(ctx, dist.Options{Lookup: os.LookupEnv, Timeout: 2 * time.Minute,
		TCP: tcp.Options{NoSharedMemory: !*shm}})
	if err != nil {
		return err
	}
	defer g.Close()
	enc := json.NewEncoder(stdout)
	for _, s := range ss {
		sec, err := timeAllReduce(ctx, g, s, *budget)
		if err != nil {
			return err
		}
		if g.Rank() == 0 {
			if err := enc.Encode(probeRow{s, sec}); err != nil {
				return err
			}
		}
	}
	return nil
}

// timeAllReduce is the median time of allreduces of bytes bytes, after
// two untimed ones; every rank runs as many as rank 0 says.
func timeAllReduce(ctx context.Context, g pg.ProcessGroup, bytes int, budget time.Duration) (float64, error) {
	t := pg.NewTensor(pg.Float32, max(bytes/4, 1))
	once := func() (float64, error) {
		start := time.Now()
		err := g.AllReduce(ctx, t, pg.Op(pg.Sum)).Wait(ctx)
		return time.Since(start).Seconds(), err
	}
	var first float64
	for range 2 {
		var err error
		if first, err = once(); err != nil {
			return 0, err
		}
	}
	n := []float32{0} // rank 0's iteration count, so every rank agrees
	if g.Rank() == 0 {
		n[0] = float32(min(max(int(budget.Seconds()/max(first, 1e-6)), 3), 50))
	}
	if err := g.Broadcast(ctx, pg.Float32s(n), 0).Wait(ctx); err != nil {
		return 0, err
	}
	var times []float64
	for range int(n[0]) {
		if err := g.Barrier(ctx).Wait(ctx); err != nil {
			return 0, err
		}
		s, err := once()
		if err != nil {
			return 0, fmt.Errorf("allreduce of %d bytes: %w", bytes, err)
		}
		times = append(times, s)
	}
	return median(times), nil
}
