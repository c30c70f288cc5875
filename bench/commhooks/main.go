// Command commhooks measures what each comm hook costs and saves for an
// MLP's gradients (by default ddpstep's 784-512-512-512-10, float32):
//
//	go run ./bench/commhooks                       # every hook, a table
//	go run ./bench/commhooks --format csv --rank 1,2,4
//
// For each hook it reports two figures.
//
//   - Bytes per step: the bytes one rank hands to allreduce in one
//     synchronised step, with the reducer's default buckets (rebuilt after
//     the first step, as in training), counted by a process group that
//     wraps pg/local; and the ratio of allreduce's bytes to the hook's. A
//     ring sends about 2(n−1)/n times these bytes per rank, for every hook
//     alike, so the ratio is also the ratio of bytes on the wire.
//   - CPU per MiB: the time the hook takes per step on one rank alone,
//     with an allreduce that does nothing (a sum over one rank is the
//     identity), per MiB of gradients: the cost of compressing and
//     decompressing. Allreduce's is its division by the world size.
//
// The PowerSGD hooks compress from the third step, with torch's defaults
// otherwise; both figures are taken once they compress. Step time on a
// slow link is bench/ddpstep's: --hook powersgd --link-bytes-per-sec.
package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/goddp/ddp/internal/cli"
)

type options struct {
	sizes  []int
	ranks  []int // PowerSGD ranks to measure
	nproc  int   // world size for the byte counts
	steps  int   // timed steps for the CPU figure
	format string
}

func main() { cli.Main("commhooks", run) }

func parse(args []string, stderr io.Writer) (options, error) {
	fs := cli.FlagSet("commhooks", stderr)
	var o options
	sizes, ranks := "784,512,512,512,10", "1,2,4"
	fs.StringVar(&sizes, "sizes", sizes, "MLP layer widths, input first")
	fs.StringVar(&ranks, "rank", ranks, "PowerSGD ranks (matrix_approximation_rank) to measure, comma-separated")
	fs.IntVar(&o.nproc, "nproc", 2, "world size for the byte counts")
	fs.IntVar(&o.steps, "steps", 20, "timed steps for the CPU figure")
	fs.StringVar(&o.format, "format", "table", "output: table or csv")
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.sizes, err = cli.ParseInts(sizes); err != nil || len(o.sizes) < 2 {
		return o, cli.Usage(fmt.Errorf("--sizes %q: want at least two positive integers", sizes))
	}
	if o.ranks, err = cli.ParseInts(ranks); err != nil || len(o.ranks) == 0 {
		return o, cli.Usage(fmt.Errorf("--rank %q: want positive integers", ranks))
	}
	switch {
	case o.nproc < 1 || o.steps < 1:
		return o, cli.Usage(fmt.Errorf("--nproc %d, --steps %d: want at least 1", o.nproc, o.steps))
	case o.format != "table" && o.format != "csv":
		return o, cli.Usage(fmt.Errorf("--format %q: want table or csv", o.format))
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var rows []row
	for _, h := range hookSpecs(o.ranks) {
		r, err := measure(ctx, o, h)
		if err != nil {
			return fmt.Errorf("%s: %w", h.label, err)
		}
		rows = append(rows, r)
	}
	report(stdout, o, rows)
	return nil
}
