package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func testSet(out *bytes.Buffer) *flag.FlagSet {
	fs := FlagSet("prog", out)
	fs.Float64("lr", 0.1, "learning rate")
	fs.Int("steps", 500, "optimizer steps to run")
	fs.String("model", "mlp", "model: mlp or cnn")
	fs.Bool("v", false, "verbose")
	return fs
}

// -h and --help print the usage, with every flag as --flag, and Code 0.
func TestParseHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		var out bytes.Buffer
		err := Parse(testSet(&out), []string{arg})
		if Code(err) != 0 || !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: %v (code %d), want flag.ErrHelp and code 0", arg, err, Code(err))
		}
		u := out.String()
		if !strings.HasPrefix(u, "Usage: prog [flags]\n") ||
			!strings.Contains(u, "\n  --lr float\n    \tlearning rate (default 0.1)\n") ||
			!strings.Contains(u, "\n  --v\tverbose\n") || strings.Contains(u, "\n  -l") {
			t.Errorf("%s: usage\n%s", arg, u)
		}
	}
}

// A mistake prints nothing during Parse; Report prints it in two lines.
func TestParseMistakes(t *testing.T) {
	for _, c := range []struct {
		args      []string
		msg, hint string
	}{
		{[]string{"--lerning-rate", "0.1"}, "flag provided but not defined: --lerning-rate",
			"Did you mean --lr? Run 'prog --help' for usage."},
		{[]string{"-stpes", "3"}, "flag provided but not defined: --stpes",
			"Did you mean --steps? Run 'prog --help' for usage."},
		{[]string{"--xyz"}, "flag provided but not defined: --xyz", "Run 'prog --help' for usage."},
		{[]string{"--steps", "many"}, `invalid value "many" for flag --steps: parse error`, "Run 'prog --help' for usage."},
		{[]string{"--v=maybe"}, `invalid boolean value "maybe" for --v: parse error`, "Run 'prog --help' for usage."},
		{[]string{"--model"}, "flag needs an argument: --model", "Run 'prog --help' for usage."},
	} {
		var out bytes.Buffer
		err := Parse(testSet(&out), c.args)
		var fe *FlagError
		if Code(err) != 2 || !errors.As(err, &fe) || out.Len() != 0 {
			t.Errorf("%q: %v (code %d), printed %q; want a *FlagError, code 2, nothing printed", c.args, err, Code(err),
				out.String())
			continue
		}
		Report(&out, "prog", err)
		if want := "prog: " + c.msg + "\n" + c.hint + "\n"; out.String() != want {
			t.Errorf("%q: Report printed\n%s\nwant\n%s", c.args, out.String(), want)
		}
	}
}

func TestSuggest(t *testing.T) {
	fs := testSet(&bytes.Buffer{})
	for typo, want := range map[string]string{
		"lerning-rate": "lr", "learning_rate": "lr", "step": "steps", "modle": "model", "--steps2": "steps",
		"x": "", "seed": "", "batch-size": "", "": "",
	} {
		if got := Suggest(fs, typo); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", typo, got, want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"lr", "lr", 0}, {"steps", "stpes", 1}, {"ca", "abc", 3},
		{"héllo", "hello", 1}} {
		if got := distance(c.a, c.b); got != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}
