package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// workerEnv makes the test binary act as a worker (see TestMain).
const workerEnv = "GODDP_LAUNCH_TEST_WORKER"

func TestMain(m *testing.M) {
	switch os.Getenv(workerEnv) {
	case "print":
		fmt.Printf("rank %s of %s, secret %d chars\n", os.Getenv("RANK"), os.Getenv("WORLD_SIZE"), len(os.Getenv("GODDP_SECRET")))
		os.Exit(0)
	case "sleep":
		time.Sleep(time.Minute) // the launcher must stop us
		os.Exit(0)
	case "fail-rank-1":
		if os.Getenv("RANK") == "1" {
			fmt.Fprintln(os.Stderr, "rank 1: out of cheese")
			os.Exit(3)
		}
		time.Sleep(time.Minute) // the launcher must stop us
		os.Exit(0)
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

// A ctx that ends while the workers are being started stops Run at once:
// it starts no more, and kills and reaps those it started (Note [stopping
// mid-spawn]).
func TestRunStopsMidSpawn(t *testing.T) {
	const n = 400
	s := spec(t, "sleep", n)
	token := fmt.Sprintf("GODDP_LAUNCH_TEST_TOKEN=%d", time.Now().UnixNano())
	s.Env = append(s.Env, token)
	s.Grace = time.Minute // a graceful stop would take this long
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := &Interrupted{Signal: syscall.SIGTERM}
	time.AfterFunc(300*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	err := Run(ctx, s)
	took := time.Since(start)
	var in *Interrupted
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "stopped after starting") {
		t.Fatalf("got %v, want the interruption, mid-spawn", err)
	}
	if took > 300*time.Millisecond+2*time.Second {
		t.Fatalf("Run returned %v after it was started, %v after ctx ended: %v", took, took-300*time.Millisecond, err)
	}
	if left := processesWith(token); len(left) > 0 {
		t.Fatalf("workers %v outlived Run", left)
	}
	t.Logf("%v after %v", err, took)
}

// processesWith lists the live processes whose environment holds kv.
func processesWith(kv string) []int {
	var pids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) == 0 || f[0] == "Z" {
			continue
		}
		env, err := os.ReadFile(filepath.Join(filepath.Dir(st), "environ"))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), kv) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		pids = append(pids, pid)
	}
	return pids
}
