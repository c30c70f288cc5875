package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// workerEnv makes the test binary act as a worker (see TestMain).
const workerEnv = "GODDP_LAUNCH_TEST_WORKER"

func TestMain(m *testing.M) {
	switch os.Getenv(workerEnv) {
	case "print":
		fmt.Printf("rank %s of %s, secret %d chars\n", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"),
			len(os.Getenv("GODDP_SECRET")))
		os.Exit(0)
	case "fail-rank-1":
		if os.Getenv("RANK") == "1" {
			fmt.Fprintln(os.Stderr, "rank 1: out of cheese")
			os.Exit(3)
		}
		time.Sleep(time.Minute) // the launcher must stop us
		os.Exit(0)
	case "panic":
		fmt.Fprintln(os.Stderr, "before the crash")
		go func() { panic("out of cheese") }()
		time.Sleep(time.Minute)
	case "join":
		joinWorker()
	case "sum":
		os.Exit(sumWorker())
	default:
		if elasticWorker(os.Getenv(workerEnv)) {
			return
		}
	}
	goleak.VerifyTestMain(m)
}

func spec(t *testing.T, mode string, n int) Spec {
	t.Helper()
	env, err := StandaloneEnv(n)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Spec{N: n, Path: self, Env: append(os.Environ(), append(env, workerEnv+"="+mode)...), Grace: time.Second}
}

func TestRunPassesTheRendezvousEnvironment(t *testing.T) {
	s := spec(t, "print", 3)
	var out bytes.Buffer
	s.Stdout = &out
	if err := Run(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "rank 0 of 3, secret 64 chars\n" {
		t.Fatalf("rank 0 printed %q", got)
	}
}

// A failing worker stops the others and is named, with its last words.
func TestRunStopsTheOthersWhenOneFails(t *testing.T) {
	s := spec(t, "fail-rank-1", 3)
	var stderr bytes.Buffer
	s.Stderr = &stderr
	start := time.Now()
	err := Run(context.Background(), s)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || !strings.Contains(we.Error(), "out of cheese") {
		t.Fatalf("got %v", err)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("took %v: the surviving workers were not stopped", el)
	}
	if !strings.Contains(stderr.String(), "[rank 1] rank 1: out of cheese") {
		t.Fatalf("stderr not prefixed by rank: %q", stderr.String())
	}
}

func TestRunRejectsEmptySpecs(t *testing.T) {
	if err := Run(context.Background(), Spec{N: 2}); !errors.Is(err, ErrNoWorkers) {
		t.Fatalf("no path: %v", err)
	}
	if err := Run(context.Background(), Spec{N: 0, Path: "/bin/true"}); err == nil {
		t.Fatal("zero workers accepted")
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	tb := &tailBuffer{max: 5}
	tb.Write([]byte("abc"))
	tb.Write([]byte("defg"))
	if got := tb.String(); got != "cdefg" {
		t.Fatalf("tail = %q", got)
	}
}

// With Settle, a worker that fails a moment after the first one is still
// recorded as a failure of its own, and a worker that would run on is
// stopped once Settle has passed.
func TestSettleKeepsEveryFailure(t *testing.T) {
	spec := Spec{N: 3, Path: "/bin/sh", Grace: time.Second, Settle: 2 * time.Second,
		Args: []string{"-c",
			`case "$RANK" in 0) sleep 0.3; echo cause >&2; exit 5;; 1) echo consequence >&2; exit 4;; *) sleep 60;; esac`}}
	start := time.Now()
	err := Run(context.Background(), spec)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 {
		t.Fatalf("Run = %v; want rank 1 first", err)
	}
	if len(we.Failures) != 2 || we.Failures[1].Rank != 0 || !strings.Contains(we.Failures[1].Tail, "cause") {
		t.Fatalf("Failures = %+v; want ranks 1 then 0 (with its tail), and not rank 2, which was stopped", we.Failures)
	}
	if len(we.Stopped) != 1 || we.Stopped[0].Rank != 2 {
		t.Fatalf("Stopped = %+v; want rank 2", we.Stopped)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Run took %v; rank 2 should have been stopped after Settle", d)
	}
}

// A worker stopped with SIGSTOP ignores SIGTERM until it is continued:
// Run kills it at once, without waiting out Settle or Grace, and says it
// found it stopped (Note [a stopped worker is killed]).
func TestStoppedWorkerIsKilled(t *testing.T) {
	spec := Spec{N: 3, Path: "/bin/sh", Grace: 30 * time.Second, Settle: 20 * time.Second,
		Args: []string{"-c",
			`case "$RANK" in 0) sleep 0.5; exit 4;; 1) kill -STOP $$; sleep 60;; *) sleep 0.7; exit 4;; esac`}}
	start := time.Now()
	err := Run(context.Background(), spec)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 0 {
		t.Fatalf("Run = %v; want rank 0 first", err)
	}
	if len(we.Failures) != 2 || !slices.Equal(we.Frozen, []int{1}) {
		t.Fatalf("Failures = %+v, Frozen = %v; want ranks 0 and 2 failed, and rank 1 found stopped", we.Failures, we.Frozen)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Run took %v; the stopped rank 1 should have been killed once it was the only one left", d)
	}
}

// Lines that start with Spec.Hidden stay out of Stderr, but not out of
// the tail that WorkerError carries.
func TestHiddenLinesStayInTheTail(t *testing.T) {
	var out bytes.Buffer
	spec := Spec{N: 1, Path: "/bin/sh", Stderr: &out, Hidden: "verdict: ",
		Args: []string{"-c", `echo one >&2; echo 'verdict: {"rank":2}' >&2; echo two >&2; exit 3`}}
	var we *WorkerError
	if err := Run(context.Background(), spec); !errors.As(err, &we) {
		t.Fatalf("Run = %v", err)
	}
	if got := out.String(); got != "[rank 0] one\n[rank 0] two\n" {
		t.Errorf("Stderr got %q", got)
	}
	if !strings.Contains(we.Tail, `verdict: {"rank":2}`) {
		t.Errorf("the tail lost the hidden line: %q", we.Tail)
	}
}
