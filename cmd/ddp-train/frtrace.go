package main

import (
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/goddp/ddp/pg/flight"
)

// runFrTrace is `ddp-train fr-trace [--prefix P] DIR`: it merges the
// ranks' flight-recorder dumps in DIR (Note [flight recorder]) and
// prints, as torch's tools/flight_recorder/fr_trace.py does, the first
// collective of each group that some ranks never issued or issued
// differently, and which ranks. It returns the exit code: 0 when the
// ranks agree, 1 when a collective is named, 2 for bad arguments or
// unreadable dumps.
func runFrTrace(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ddp-train fr-trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prefix := fs.String("prefix", flight.DefaultPrefix, "the dump files' names: PREFIX followed by the rank")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ddp-train fr-trace [--prefix P] DIR\n\nMerges every rank's flight-recorder dump in DIR (written on failure or SIGUSR1; see --flight-dir)\nand prints the first collective where the ranks disagree or some never arrived.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	dumps, err := flight.ReadDir(fs.Arg(0), *prefix)
	if err != nil {
		fmt.Fprintf(stderr, "ddp-train fr-trace: %v\n", err)
		return 2
	}
	ranks := make([]int, 0, len(dumps))
	for r := range dumps {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	fmt.Fprintf(stdout, "loaded %d dumps: ranks %v\n", len(dumps), ranks)
	if missing := flight.MissingDumps(dumps); len(missing) > 0 {
		fmt.Fprintf(stdout, "no dump from ranks %v (killed or stopped before they could write one); left out\n", missing)
	}
	findings := flight.Analyze(dumps)
	if len(findings) == 0 {
		// A hang whose culprit left no dump: the others all wait in one collective.
		if findings = flight.Stalled(dumps); len(findings) > 0 {
			fmt.Fprintln(stdout, "every rank with a dump waits in the collective below, which the ranks without one never completed:")
		}
	}
	if len(findings) == 0 {
		fmt.Fprintln(stdout, "no mismatch found: every rank issued the same collectives")
		return 0
	}
	for _, f := range findings {
		fmt.Fprint(stdout, f)
	}
	return 1
}
