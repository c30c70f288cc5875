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
// unreadable dumps. Its output is bounded whatever the dumps hold (Note
// [fr-trace's output is bounded]).
func runFrTrace(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ddp-train fr-trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prefix := fs.String("prefix", flight.DefaultPrefix, "the dump files' names: PREFIX followed by the rank")
	all := fs.Bool("all", false, fmt.Sprintf("print every finding in full (default: the first %d groups' findings, each "+
		"list of ranks cut at %d, and a count of the rest)", frMaxFindings, frMaxItems))
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: ddp-train fr-trace [--prefix P] [--all] DIR\n\nMerges every rank's flight-recorder "+
			"dump in DIR (written on failure or SIGUSR1; see --flight-dir)\nand prints the first collective where the ranks "+
			"disagree or some never arrived.")
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
	limit := frMaxItems
	if *all {
		limit = -1
	}
	fmt.Fprintf(stdout, "loaded %d dumps: ranks %s\n", len(dumps), listN(ranks, limit))
	if missing := flight.MissingDumps(dumps); len(missing) > 0 {
		fmt.Fprintf(stdout, "no dump from ranks %s (killed or stopped before they could write one); left out\n",
			listN(missing, limit))
	}
	findings := flight.Analyze(dumps)
	if len(findings) == 0 {
		// A hang whose culprit left no dump: the others all wait in one collective.
		if findings = flight.Stalled(dumps); len(findings) > 0 {
			fmt.Fprintln(stdout,
				"every rank with a dump waits in the collective below, which the ranks without one never completed:")
		}
	}
	if len(findings) == 0 {
		fmt.Fprintln(stdout, "no mismatch found: every rank issued the same collectives")
		return 0
	}
	printFindings(stdout, findings, *all)
	return 1
}

// Note [fr-trace's output is bounded]: a dump can name any number of
// groups, ranks and sizes (a hostile or damaged one; a 1 MB dump printed
// whole gave 161 MB), and a person reads the first finding. So without
// --all fr-trace prints the first frMaxFindings groups' findings, each
// with its lists of ranks cut at frMaxItems and its other fields at 8
// times that many bytes (flight.Finding.Brief), every cut saying how much
// it left out, and then how many more groups disagree: a few hundred KB at
// most, whatever the dumps hold. --all prints everything, as before.

// fr-trace's bounds without --all.
const (
	frMaxFindings = 16
	frMaxItems    = 32
)

// printFindings prints findings within Note [fr-trace's output is bounded].
func printFindings(w io.Writer, findings []flight.Finding, all bool) {
	for i, f := range findings {
		switch {
		case all:
			fmt.Fprint(w, f)
		case i == frMaxFindings:
			fmt.Fprintf(w, "... and %d more groups where the ranks disagree; --all prints them\n", len(findings)-i)
			return
		default:
			fmt.Fprint(w, f.Brief(frMaxItems))
		}
	}
}

// listN prints the first n of ranks as %v does, and how many more there
// are: "[0 1 2 ... 7 more]". A negative n cuts nothing.
func listN(ranks []int, n int) string {
	if n < 0 || len(ranks) <= n {
		return fmt.Sprint(ranks)
	}
	s := fmt.Sprint(ranks[:n])
	return fmt.Sprintf("%s ... %d more]", s[:len(s)-1], len(ranks)-n)
}
