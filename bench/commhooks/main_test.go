package main

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/ddp/internal/cli"
)

func TestParse(t *testing.T) {
	for _, args := range [][]string{
		{"--sizes", "10"}, {"--sizes", "10,x"}, {"--rank", "0"}, {"--nproc", "0"}, {"--steps", "0"}, {"--format", "json"},
	} {
		if _, err := parse(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
}

// A small MLP: every hook runs, PowerSGD's byte count is the formula's,
// and the ratios are allreduce's bytes over the hook's.
func TestSmallRun(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"--sizes", "40,30,5", "--rank", "1", "--steps", "2", "--format", "csv"}, &out,
		&bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] {
		f := strings.Split(line, ",")
		rows[f[0]] = f
	}
	// fc1.weight 40×30 → (40+30)·1, fc2.weight 30×5 → (30+5)·1, biases
	// 1×30 and 1×5 as they are; float32.
	want := map[string]int{"allreduce": 4 * (40*30 + 30 + 30*5 + 5), "fp16": 2 * (40*30 + 30 + 30*5 + 5),
		"powersgd rank 1": 4 * (70 + 35 + 30 + 5)}
	for hook, bytes := range want {
		if got, _ := strconv.Atoi(rows[hook][2]); got != bytes {
			t.Errorf("%s: %d bytes per step, want %d (%v)", hook, got, bytes, rows[hook])
		}
	}
	if len(rows) != 5 || rows["batched-powersgd rank 1"] == nil {
		t.Errorf("rows: %v", rows)
	}
}

// -h and --help print the usage with every flag as --flag and exit 0; a
// typo prints nothing here (cli.Main prints it and a hint) and exits 2.
func TestHelpAndTypo(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out bytes.Buffer
		_, err := parse([]string{arg}, &out)
		if cli.Code(err) != 0 || !strings.Contains(out.String(), "\n  --nproc int\n") ||
			strings.Contains(out.String(), "\n  -n") {
			t.Errorf("%s: %v (exit %d), usage:\n%s", arg, err, cli.Code(err), out.String())
		}
	}
	var out bytes.Buffer
	_, err := parse([]string{"--nprocs", "2"}, &out)
	var fe *cli.FlagError
	if cli.Code(err) != 2 || !errors.As(err, &fe) || fe.Suggest != "nproc" || out.Len() != 0 {
		t.Errorf("--nprocs: %v (exit %d), printed %q; want a flag error suggesting --nproc, exit 2, nothing printed", err,
			cli.Code(err), out.String())
	}
}
