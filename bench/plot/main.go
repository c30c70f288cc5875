// Command plot turns a goddp timeline trace or a benchmark CSV into a
// chart, PNG or SVG, drawn with gonum.org/v1/plot: axes with labels and
// units, a legend, readable text. So results can be looked at, not only
// read.
//
//	go run ./bench/plot --in trace/rank-0.json,trace/rank-1.json --out timeline.png
//	go run ./bench/allreduce ... > ar.csv && go run ./bench/plot --in ar.csv --y busbw_GBps --out busbw.svg
//	go run ./bench/ddpstep --format csv > step.csv && go run ./bench/plot --in step.csv --out step.png
//
// A trace (.json, as written by ddp-train --timeline) becomes a Gantt
// chart of the last --steps steps: one row per lane of each rank
// (compute, reducer, each bucket's communication), coloured by event,
// time in ms on the x axis. A CSV whose first column is numeric becomes
// a line chart of the --y column against it (log scale for byte sizes;
// one line per collective when there is an "op" column); otherwise a
// horizontal bar chart of the --y column per row. Lines starting with
// '#' are skipped. The --out extension, .png or .svg, picks the format.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/goddp/ddp/internal/cli"
)

func main() {
	cli.Main("plot", func(args []string, _, stderr io.Writer) error { return run(args, stderr) })
}

func run(args []string, stderr io.Writer) error {
	fs := cli.FlagSet("plot", stderr)
	in := fs.String("in", "", "input: a trace .json (several, comma-separated, for several ranks) or a benchmark .csv")
	out := fs.String("out", "", "output chart, .png or .svg (default: the first input with .png)")
	steps := fs.Int("steps", 3, "traces: how many of the last steps to show")
	y := fs.String("y", "", "CSV: the column to plot (default: the last)")
	title := fs.String("title", "", "title (default: the inputs and what is shown)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *in == "" || fs.NArg() > 0 || *steps < 1 {
		fs.Usage()
		return fmt.Errorf("%w: want --in FILE[,FILE...], no other arguments, and --steps of at least 1", cli.ErrUsage)
	}
	paths := strings.Split(*in, ",")
	if *out == "" {
		*out = strings.TrimSuffix(paths[0], filepath.Ext(paths[0])) + ".png"
	}
	if _, err := formatOf(*out); err != nil { // before the work, not after
		return err
	}
	c, err := chartOf(paths, *steps, *y, *title)
	if err != nil {
		return err
	}
	return c.save(*out)
}

func chartOf(paths []string, steps int, y, title string) (*chart, error) {
	if strings.EqualFold(filepath.Ext(paths[0]), ".csv") {
		if len(paths) > 1 {
			return nil, fmt.Errorf("%w: one CSV at a time", cli.ErrUsage)
		}
		f, err := os.Open(paths[0])
		if err != nil {
			return nil, err
		}
		defer f.Close()
		t, err := readTable(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", paths[0], err)
		}
		return plotTable(t, y, filepath.Base(paths[0]), title)
	}
	t, err := readTraces(paths)
	if err != nil {
		return nil, err
	}
	return plotTrace(t, steps, title), nil
}
