package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/goddp/ddp/dist"
	"github.com/goddp/ddp/launch"
)

// workerMarker in a process's environment makes it a worker rank.
const workerMarker = "GODDP_GOMLX_WORKER"

type config struct {
	nproc, steps, batch, hidden int
	lr                          float64
	optimizer                   string
	seed                        uint64
	checkpoint                  string
	timeout                     time.Duration
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("gomlx", flag.ContinueOnError)
	fs.IntVar(&c.nproc, "nproc", 2, "worker processes to launch on this machine")
	fs.IntVar(&c.steps, "steps", 200, "optimizer steps")
	fs.IntVar(&c.batch, "batch", 64, "global batch size, split evenly over the ranks")
	fs.IntVar(&c.hidden, "hidden", 64, "hidden units")
	fs.Float64Var(&c.lr, "lr", 0.01, "learning rate")
	fs.StringVar(&c.optimizer, "optimizer", "adam", "adam or sgd (GoMLX's)")
	fs.Uint64Var(&c.seed, "seed", 1, "data, shuffling and initialisation seed")
	fs.StringVar(&c.checkpoint, "checkpoint", "", "GoMLX checkpoint directory: rank 0 resumes from it and saves to it")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	return c, fs.Parse(args)
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) { // -h: the flag package printed the usage
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2)
	}
	if os.Getenv(workerMarker) == "1" {
		os.Exit(workerMain(c, os.Stdout, os.Stderr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if err := launch.Self(ctx, c.nproc, os.Args[1:], workerMarker+"=1", os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gomlx:", err)
		os.Exit(1)
	}
}

// workerMain is one rank: it joins the job its launcher describes,
// trains, and reports.
func workerMain(c config, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	g, err := dist.InitProcessGroup(ctx, dist.Options{Timeout: time.Minute})
	if err != nil {
		fmt.Fprintln(stderr, "gomlx: joining the job:", err)
		return 1
	}
	defer g.Close()
	res, err := trainRank(ctx, g, c)
	if err != nil {
		g.Abort(err) // the other ranks fail at once instead of waiting out the timeout
		fmt.Fprintf(stderr, "gomlx: rank %d: %v\n", g.Rank(), err)
		return 1
	}
	if g.Rank() == 0 {
		fmt.Fprintf(stdout,
			"ranks %d, loss %.4f -> %.4f, test accuracy %.1f%% (chance 25%%), params %x, replicas identical\n",
			g.Size(), res.firstLoss, res.lastLoss, 100*res.accuracy, sha256.Sum256(res.params))
	}
	return 0
}

var errBadBatch = errors.New("--batch must be a positive multiple of the number of ranks")
