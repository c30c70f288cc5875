package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/local"
	"go.uber.org/zap"
)

// A 3-rank job in which rank 2 stops issuing collectives after its
// third allreduce: ranks 0 and 1 time out on the fourth and dump their
// flight recorders into --flight-dir; SIGUSR1 then has every rank dump
// (rank 2 among them, alive but stopped); and `ddp-train fr-trace DIR`
// names the fourth allreduce and rank 2.
func TestFlightRecorderDumpsAndFrTraceNamesTheStoppedRank(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "flight")
	c := config{flightDir: dir, timeout: 300 * time.Millisecond}
	groups, err := local.New(3, local.Options{Timeout: c.timeout})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*flight.Recorder, 3)
	for r, g := range groups {
		rec, stop, err := wrapFlight(g, c, r, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		defer stop()
		recs[r] = rec
	}
	var failed, stopped sync.WaitGroup
	failed.Add(2)
	stopped.Add(1)
	release := make(chan struct{})
	errs := make([]error, 3)
	for r, rec := range recs {
		go func() {
			ctx := context.Background()
			n := 4
			if r == 2 {
				n = 3
			}
			for i := range n {
				if err := rec.AllReduce(ctx, pg.Float32s(make([]float32, 4+i)), pg.Op(pg.Sum)).Wait(ctx); err != nil {
					errs[r] = err
					break
				}
			}
			if r < 2 {
				failed.Done()
			} else {
				stopped.Done()
			}
			<-release // alive until the dumps are read, as a stopped process is
		}()
	}
	failed.Wait()
	stopped.Wait()
	defer close(release)
	for r, err := range errs {
		if (r < 2) != errors.Is(err, pg.ErrTimeout) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	waitForDumps(t, dir, 2) // the failures' dumps
	os.Remove(filepath.Join(dir, flight.DefaultPrefix+"0"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitForDumps(t, dir, 3)

	var stdout, stderr bytes.Buffer
	if code := run([]string{"fr-trace", dir}, nil, &stdout, &stderr); code != 1 {
		t.Fatalf("fr-trace exit %d, want 1; stderr: %s", code, stderr.String())
	}
	for _, line := range []string{"loaded 3 dumps: ranks [0 1 2]", "Not all ranks joining collective 4",
		"collective: nccl:all_reduce", "missing ranks: {2}", "input sizes: [[7]]"} {
		if !strings.Contains(stdout.String(), line) {
			t.Errorf("fr-trace's output lacks %q:\n%s", line, stdout.String())
		}
	}
}

// waitForDumps waits until dir holds n dumps.
func waitForDumps(t *testing.T, dir string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(dir, flight.DefaultPrefix+"*")); len(m) == n {
			return
		}
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*"))
	t.Fatalf("dumps in %s: %v, want %d", dir, m, n)
}

// fr-trace refuses a missing directory and bad arguments with exit 2,
// and says so when the ranks agree.
func TestFrTraceArguments(t *testing.T) {
	var stdout, stderr bytes.Buffer
	for _, args := range [][]string{{"fr-trace"}, {"fr-trace", t.TempDir()}, {"fr-trace", "--nope", "x"}} {
		if code := run(args, nil, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	dir := t.TempDir()
	groups, err := local.New(1, local.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer groups[0].Close()
	rec, err := flight.Wrap(groups[0], flight.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rec.Barrier(ctx).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.DumpFile(dir); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := run([]string{"fr-trace", dir}, nil, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "no mismatch") {
		t.Errorf("exit %d:\n%s", code, stdout.String())
	}
}

// Without --flight-dir, failures dump into CHECKPOINT/flight, or nowhere.
func TestFlightDirDefault(t *testing.T) {
	if d := flightDir(config{checkpointDir: "/ck"}); d != "/ck/flight" {
		t.Errorf("with --checkpoint: %q", d)
	}
	if d := flightDir(config{}); d != "" {
		t.Errorf("without: %q", d)
	}
}
