package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// ErrUsage is what errors.Is finds in an error that says the program was
// called wrongly (a bad flag or value): Code gives it exit status 2, as
// the flag package's own programs exit.
var ErrUsage = errors.New("usage")

// Usage marks err as a usage error, keeping its message; errors.Is finds
// both ErrUsage and whatever err wraps (flag.ErrHelp, for one).
func Usage(err error) error { return usageError{err} }

type usageError struct{ error }

func (u usageError) Unwrap() error        { return u.error }
func (u usageError) Is(target error) bool { return target == ErrUsage }

// Code is the exit status for what a program's run returned: 0 for no
// error and for --help (the flag package has printed the usage), 2 for a
// usage error, 1 for any other.
func Code(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	return 1
}

// Main calls run with the program's arguments and standard streams,
// prints its error after the program's name (Report), and exits with
// Code.
func Main(name string, run func(args []string, stdout, stderr io.Writer) error) {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if Code(err) != 0 {
		Report(os.Stderr, name, err)
	}
	os.Exit(Code(err))
}

// FlagSet is a flag set that returns its errors (for Usage) instead of
// exiting, and prints its usage to stderr: "Usage: NAME [flags]" and the
// flags in --flag form (PrintDefaults). Parse it with Parse.
func FlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nFlags:\n", name)
		PrintDefaults(fs)
	}
	return fs
}

// ParseInts parses a comma-separated list of positive integers, such as
// layer widths; spaces around each are allowed. An empty s is no
// integers.
func ParseInts(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}
