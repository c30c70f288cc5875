package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/goddp/ddp/internal/cli"
	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg"
	"go.uber.org/goleak"
)

// TestMain is also the worker of the tcp test: launch.Self starts this
// test binary again with the command's arguments and launch.LoopbackWorkerEnv set.
func TestMain(m *testing.M) {
	if os.Getenv(launch.LoopbackWorkerEnv) == "1" {
		if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "allreduce worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func TestLocalPrintsCSV(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"--backend", "local", "--nproc", "3", "--sizes", "0,4096,65540", "--iters", "3"}, &out,
		&errOut); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if lines[0] != csvHeader || len(lines) != 4 {
		t.Fatalf("output:\n%s", out.String())
	}
	if want := "65540,16385,float32,allreduce,sum,,"; !strings.HasPrefix(lines[3], want) {
		t.Fatalf("last row %q, want it to start with %q", lines[3], want)
	}
	if !strings.Contains(errOut.String(), "measured/bound") {
		t.Fatalf("no memory-bandwidth bound reported: %q", errOut.String())
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--backend", "mpi"}, {"--nproc", "0"}, {"--sizes", "12,x"}, {"--dtype", "int128"},
		{"--op", "allreduce,bcast"}, {"--op", ""}, {"--format", "json"}, {"--root", "2"}, {"--root", "-1"},
		{"--backend", "local", "--compare-local"},
	} {
		var out, errOut bytes.Buffer
		err := run(args, &out, &errOut)
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}

// TestBusFactorsFollowNcclTests checks busbw and the count and size
// columns against values worked out by hand from nccl-tests' src/*.cu
// (GetCollByteCount and GetBw): 1000 bytes in 1 µs is an algbw of 1 GB/s,
// so busbw is the factor itself.
func TestBusFactorsFollowNcclTests(t *testing.T) {
	type want struct {
		bus          float64 // busbw at algbw 1
		count, bytes int     // for a requested 1000 bytes of float32
	}
	cases := map[int]map[string]want{
		2: {
			"allreduce": {1, 250, 1000}, "broadcast": {1, 250, 1000}, "reduce": {1, 250, 1000}, "sendrecv": {1, 250, 1000},
			"allgather": {0.5, 125, 1000}, "reducescatter": {0.5, 125, 1000}, "alltoall": {0.5, 125, 1000},
			"gather": {0.5, 125, 1000}, "scatter": {0.5, 125, 1000},
			"barrier": {1, 0, 0}, // no bytes: timed once, as 0 (so busbw 0)
		},
		4: {
			"allreduce": {1.5, 250, 1000}, "broadcast": {1, 250, 1000}, "reduce": {1, 250, 1000}, "sendrecv": {1, 250, 1000},
			// 250 elements over 4 ranks: chunks of 62, 248 elements in all.
			"allgather": {0.75, 62, 992}, "reducescatter": {0.75, 62, 992}, "alltoall": {0.75, 62, 992},
			"gather": {0.75, 62, 992}, "scatter": {0.75, 62, 992},
			"barrier": {1, 0, 0},
		},
		8: {
			"allreduce": {1.75, 250, 1000}, "broadcast": {1, 250, 1000}, "reduce": {1, 250, 1000}, "sendrecv": {1, 250, 1000},
			"allgather": {0.875, 31, 992}, "reducescatter": {0.875, 31, 992}, "alltoall": {0.875, 31, 992},
			"gather": {0.875, 31, 992}, "scatter": {0.875, 31, 992},
			"barrier": {1, 0, 0},
		},
	}
	for n, ops := range cases {
		if len(ops) != len(collectives()) {
			t.Fatalf("the test covers %d ops, the command has %d", len(ops), len(collectives()))
		}
		for _, c := range collectives() {
			w, ok := ops[c.name]
			if !ok {
				t.Fatalf("no expected values for %s", c.name)
			}
			count, size := c.layout(1000, pg.Float32, n)
			if count != w.count || size != w.bytes {
				t.Errorf("%s on %d ranks: count %d size %d, want %d and %d", c.name, n, count, size, w.count, w.bytes)
			}
			r := result{op: c, bytes: 1000, perIter: 1000, n: n} // 1 µs
			if r.algbw() != 1 || r.busbw() != w.bus {
				t.Errorf("%s on %d ranks: algbw %v busbw %v, want 1 and %v", c.name, n, r.algbw(), r.busbw(), w.bus)
			}
		}
	}
	// The formula shown in headers agrees with the factor used.
	for _, c := range collectives() {
		want := map[string]float64{"2(n-1)/n": 1.5, "(n-1)/n": 0.75, "1": 1}[c.formula]
		if c.factor(4) != want {
			t.Errorf("%s: formula %q but factor(4) = %v", c.name, c.formula, c.factor(4))
		}
	}
}

func TestTableFormatLooksLikeNcclTests(t *testing.T) {
	r := result{op: collectives()[0], count: 262144, bytes: 1 << 20, dtype: pg.Float32, perIter: 250_000, n: 2}
	want := "     1048576        262144   float32     sum            250.0    4.19    4.19"
	if got := r.table(); got != want {
		t.Errorf("table row\n%q, want\n%q", got, want)
	}
}

// TestEveryOpOnLocal runs every op once on a local world of 3 ranks, in
// both formats, and checks one row per op and size.
func TestEveryOpOnLocal(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"--backend", "local", "--nproc", "3", "--op", "all", "--sizes", "0,4096", "--iters", "2",
		"--warmup", "1", "--root", "1"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if lines[0] != csvHeader {
		t.Fatalf("output:\n%s", out.String())
	}
	rows := map[string]int{}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		if len(f) != 9 {
			t.Fatalf("row %q (a skipped op?)\n%s", l, out.String())
		}
		rows[f[3]]++
		if f[0] == "4096" && f[3] == "gather" && (f[1] != "341" || f[4] != "" || f[5] != "1") {
			// 1024 float32 over 3 ranks: chunks of 341
			t.Errorf("gather row %q: want count 341, no redop, root 1", l)
		}
	}
	for _, c := range collectives() {
		if want := map[bool]int{false: 2, true: 1}[c.sizeless]; rows[c.name] != want {
			t.Errorf("%s: %d rows, want %d\n%s", c.name, rows[c.name], want, out.String())
		}
	}
	out.Reset()
	if err := run([]string{"--backend", "local", "--nproc", "2", "--op", "reducescatter,sendrecv", "--sizes", "4096",
		"--iters", "1", "--format", "table"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# reducescatter: 2 ranks, local backend, busbw = algbw × (n-1)/n",
		"# sendrecv: 2 ranks, local backend, busbw = algbw × 1", "# Avg bus bandwidth"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSendRecvNeedsTwoRanks(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run([]string{"--backend", "local", "--nproc", "1", "--op", "sendrecv", "--sizes", "64", "--iters", "1"}, &out,
		&errOut)
	if err == nil || !strings.Contains(err.Error(), "at least 2 ranks") {
		t.Fatalf("got %v, want an error asking for 2 ranks", err)
	}
	// --op all skips it with a note instead.
	out.Reset()
	if err := run([]string{"--backend", "local", "--nproc", "1", "--op", "all", "--sizes", "64", "--iters", "1",
		"--warmup", "0"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "# skipped sendrecv: needs at least 2 ranks") {
		t.Errorf("no skip note:\n%s", out.String())
	}
}

// TestTCPWorkers runs the real command for every op: launcher, two
// worker processes (this test binary, see TestMain), the tcp backend over
// loopback.
func TestTCPWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	var out, errOut bytes.Buffer
	if err := run([]string{"--backend", "tcp", "--nproc", "2", "--op", "all", "--sizes", "65536", "--iters", "2",
		"--warmup", "1", "--timeout", "30s"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1+len(collectives()) || lines[0] != csvHeader {
		t.Fatalf("output:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	for i, c := range collectives() {
		count, size := 16384, 65536
		switch {
		case c.chunked:
			count = 8192
		case c.sizeless:
			count, size = 0, 0
		}
		if want := fmt.Sprintf("%d,%d,float32,%s,", size, count, c.name); !strings.HasPrefix(lines[1+i], want) {
			t.Errorf("row %q, want it to start with %q", lines[1+i], want)
		}
	}
}

// TestCompareLocal: --compare-local prints, for each allreduce size,
// tcp's busbw over pg/local's measured in the same job, and the bound for
// both.
func TestCompareLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	var out, errOut bytes.Buffer
	if err := run([]string{"--backend", "tcp", "--nproc", "2", "--sizes", "65536,1048576", "--iters", "2", "--warmup", "1",
		"--timeout", "30s", "--compare-local"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`# allreduce bytes=65536 tcp busbw=[0-9.]+ GB/s local busbw=[0-9.]+ GB/s tcp/local=[0-9.]+`),
		regexp.MustCompile(`# allreduce bytes=1048576 tcp busbw=[0-9.]+ GB/s local busbw=[0-9.]+ GB/s tcp/local=[0-9.]+`),
		regexp.MustCompile(
			`(?s)# bytes=1048576 ranks=2 bound=[0-9.]+us measured=.*# bytes=1048576 ranks=2 bound=[0-9.]+us measured=`),
	} {
		if !want.MatchString(errOut.String()) {
			t.Errorf("stderr does not match %v:\n%s", want, errOut.String())
		}
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
