package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// FlagError is a command line the flag package refused (an unknown flag,
// a bad value, a missing argument). Its message names flags as the usage
// and README write them, --flag; Hint is the line to print after it.
type FlagError struct {
	Program string // the flag set's name, for "Run 'PROGRAM --help'"
	Msg     string // the flag package's message, in --flag form
	Suggest string // a defined flag close to an unknown one, or ""
}

func (e *FlagError) Error() string { return e.Msg }

// Hint is one line: a suggestion when there is one, and where the usage
// is. The usage itself is not printed: for a typo it would bury the one
// line that matters under a hundred others.
func (e *FlagError) Hint() string {
	h := fmt.Sprintf("Run '%s --help' for usage.", e.Program)
	if e.Suggest != "" {
		h = fmt.Sprintf("Did you mean --%s? %s", e.Suggest, h)
	}
	return h
}

// Parse parses args into fs. --help and -h print fs's usage and return
// an error wrapping flag.ErrHelp (Code 0). Any other mistake prints
// nothing and returns a usage error (Code 2) holding a *FlagError, so the
// program prints it once, with Report, instead of the flag package
// printing it and the whole usage before the program prints it again.
func Parse(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
			PrintDefaults(fs)
		}
		return Usage(err)
	}
	fe := &FlagError{Program: fs.Name(), Msg: doubleDash(err.Error())}
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		fe.Suggest = Suggest(fs, name)
	}
	return Usage(fe)
}

// doubleDash rewrites the flag package's "-name" in its messages as
// "--name", the form the usage and the README show.
func doubleDash(msg string) string {
	for _, p := range []string{"not defined: -", "needs an argument: -", "for flag -", " for -"} {
		if i := strings.Index(msg, p); i >= 0 {
			return msg[:i+len(p)] + "-" + msg[i+len(p):]
		}
	}
	return msg
}

// Report prints err after the program's name as one line, and, for a
// *FlagError, its hint as a second.
func Report(w io.Writer, program string, err error) {
	fmt.Fprintf(w, "%s: %v\n", program, err)
	var fe *FlagError
	if errors.As(err, &fe) {
		fmt.Fprintln(w, fe.Hint())
	}
}

// PrintDefaults is fs.PrintDefaults with each flag written --name, as
// the README and every example write them (the flag package accepts
// both forms and prints only -name).
func PrintDefaults(fs *flag.FlagSet) {
	var b bytes.Buffer
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		// A flag's first line is "  -name"; its usage lines start with
		// four spaces and a tab, so they never match.
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			line = "  --" + rest
		}
		io.WriteString(out, line)
	}
}
