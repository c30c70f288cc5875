package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// elasticWorker runs the worker modes of the elastic tests; false if mode
// is none of them.
func elasticWorker(mode string) bool {
	attempt, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT"))
	rank := os.Getenv("RANK")
	switch {
	case strings.HasPrefix(mode, "fail-attempts-below-"):
		// Rank 1 fails in every attempt below N; then all succeed.
		n, _ := strconv.Atoi(strings.TrimPrefix(mode, "fail-attempts-below-"))
		// Every rank says so on stderr: rank 0 may be stopped before it
		// could, rank 1 always does.
		fmt.Fprintf(os.Stderr, "attempt %d run %s port %s\n", attempt, os.Getenv("TORCHELASTIC_RUN_ID"),
			os.Getenv("MASTER_PORT"))
		if rank == "1" && attempt < n {
			fmt.Fprintf(os.Stderr, "rank 1: failing in attempt %d\n", attempt)
			os.Exit(3)
		}
		os.Exit(0)
	case mode == "sigterm-exit":
		// Rank 1 stops as a preempted worker does.
		if rank == "1" {
			fmt.Fprintf(os.Stderr, "attempt %d\n", attempt)
			os.Exit(128 + int(syscall.SIGTERM))
		}
		time.Sleep(time.Minute)
		os.Exit(0)
	case mode == "catch":
		// Every rank waits for a signal and exits with 128+it.
		c := make(chan os.Signal, 2)
		signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
		fmt.Println("ready")
		select {
		case s := <-c:
			fmt.Println("got", SignalName(s.(syscall.Signal)))
			os.Exit(128 + int(s.(syscall.Signal)))
		case <-time.After(time.Minute):
			os.Exit(0)
		}
	}
	return false
}

// elasticSpec is a newSpec for RunElastic: a fresh rendezvous per attempt.
func elasticSpec(t *testing.T, mode string, n int, stderr *bytes.Buffer) func(int) (Spec, error) {
	return func(attempt int) (Spec, error) {
		s := spec(t, mode, n)
		s.Env = append(s.Env, "TORCHELASTIC_RESTART_COUNT="+strconv.Itoa(attempt), "TORCHELASTIC_RUN_ID=r1")
		s.Stderr = stderr
		return s, nil
	}
}

// rank1Attempts are the lines rank 1 wrote about its attempts.
func rank1Attempts(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if a, ok := strings.CutPrefix(l, "[rank 1] attempt "); ok {
			out = append(out, "attempt "+a)
		}
	}
	return out
}

func TestRunElasticRestartsEveryWorker(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	var out bytes.Buffer
	start := time.Now()
	err := RunElastic(context.Background(), Elastic{MaxRestarts: 3, Backoff: 50 * time.Millisecond, Logger: zap.New(core)},
		elasticSpec(t, "fail-attempts-below-2", 2, &out))
	if err != nil {
		t.Fatalf("the third attempt should succeed: %v", err)
	}
	// Rank 1 ran in attempts 0, 1 and 2, each with its own port.
	lines := rank1Attempts(out.String())
	if len(lines) != 3 {
		t.Fatalf("rank 1 ran %d times:\n%s", len(lines), out.String())
	}
	ports := map[string]bool{}
	for i, l := range lines {
		f := strings.Fields(l)
		if f[1] != strconv.Itoa(i) {
			t.Fatalf("attempt %d: %q", i, l)
		}
		ports[f[5]] = true
	}
	if len(ports) != 3 {
		t.Errorf("attempts reused a rendezvous port: %v", lines)
	}
	restarts := logs.FilterMessageSnippet("restarting").All()
	if len(restarts) != 2 {
		t.Fatalf("%d restarts logged, want 2: %v", len(restarts), logs.All())
	}
	for i, e := range restarts {
		f := e.ContextMap()
		if f["restart"] != int64(i+1) || f["failed_rank"] != int64(1) ||
			!strings.Contains(f["last_line"].(string), "failing in attempt "+strconv.Itoa(i)) {
			t.Errorf("restart %d logged %v", i+1, f)
		}
	}
	if el := time.Since(start); el < 150*time.Millisecond { // 50ms, then 100ms
		t.Errorf("restarted after %v: no backoff", el)
	}
}

func TestRunElasticGivesUpAfterMaxRestarts(t *testing.T) {
	var out bytes.Buffer
	err := RunElastic(context.Background(), Elastic{MaxRestarts: 1, Backoff: time.Millisecond},
		elasticSpec(t, "fail-attempts-below-9", 2, &out))
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || we.Attempt != 1 || !strings.Contains(we.Tail, "failing in attempt 1") {
		t.Fatalf("got %#v", err)
	}
	if n := len(rank1Attempts(out.String())); n != 2 {
		t.Fatalf("%d attempts, want 2:\n%s", n, out.String())
	}
}

func TestRunElasticRetryRefuses(t *testing.T) {
	var out bytes.Buffer
	err := RunElastic(context.Background(), Elastic{MaxRestarts: 5, Retry: func(*WorkerError) bool { return false }},
		elasticSpec(t, "fail-attempts-below-9", 2, &out))
	var we *WorkerError
	if !errors.As(err, &we) || we.Attempt != 0 || len(rank1Attempts(out.String())) != 1 {
		t.Fatalf("got %v after\n%s", err, out.String())
	}
}

// A worker that stopped on SIGTERM (exit 143) was preempted: no restart.
func TestRunElasticDoesNotRestartAfterASignal(t *testing.T) {
	var stderr bytes.Buffer
	err := RunElastic(context.Background(), Elastic{MaxRestarts: 5}, elasticSpec(t, "sigterm-exit", 2, &stderr))
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 {
		t.Fatalf("got %v", err)
	}
	if sig, ok := StoppedBySignal(err); !ok || sig != syscall.SIGTERM {
		t.Fatalf("StoppedBySignal(%v) = %v, %v", err, sig, ok)
	}
	if n := strings.Count(stderr.String(), "attempt"); n != 1 {
		t.Fatalf("want one attempt, not restarted after a SIGTERM exit:\n%s", stderr.String())
	}
}

// An interrupted launcher forwards its signal, once, and does not restart.
func TestRunElasticForwardsTheSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(SignalName(sig), func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			var out syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- RunElastic(ctx, Elastic{MaxRestarts: 5}, func(attempt int) (Spec, error) {
					s := spec(t, "catch", 2)
					s.Stdout = &out
					return s, nil
				})
			}()
			for !strings.Contains(out.String(), "ready") {
				time.Sleep(10 * time.Millisecond)
			}
			cancel(&Interrupted{Signal: sig})
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("RunElastic still running 20s after the interrupt")
			}
			var in *Interrupted
			if !errors.As(err, &in) || in.Signal != sig || in.ExitCode() != 128+int(sig) {
				t.Fatalf("got %v", err)
			}
			if got := out.String(); got != "ready\ngot "+SignalName(sig)+"\n" {
				t.Fatalf("rank 0 printed %q", got)
			}
		})
	}
}

func TestElasticBackoffDoublesUpToTheCap(t *testing.T) {
	e := Elastic{Backoff: time.Second, MaxBackoff: 5 * time.Second}
	var got []time.Duration
	for k := 1; k <= 5; k++ {
		got = append(got, e.backoff(k))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("backoffs %v, want %v", got, want)
	}
	if d := (Elastic{}).backoff(3); d != 0 {
		t.Fatalf("zero Backoff waits %v", d)
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{"": "", "a": "a", "a\nb\n": "b", "a\n\n": "a", "\n": ""} {
		if got := lastLine(in); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe to read while a worker writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A node of a job of several machines (Elastic.Node) starts its workers
// at global rank Node.Rank*n, tells them the job's master, size and
// secret, and names global ranks in its output and errors.
func TestProgramElasticOnANode(t *testing.T) {
	node := &Node{Nodes: 3, Rank: 1, MasterAddr: "10.9.8.7", MasterPort: 29511, Secret: "0123456789abcdef0123456789abcdef"}
	script := `echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR:$MASTER_PORT ` +
		`$GODDP_SECRET"; [ "$LOCAL_RANK" = 0 ] || exit 7`
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := ProgramElastic(ctx, 2, "/bin/sh", []string{"-c", script}, nil, &out, &errOut,
		Elastic{Node: node, EveryStdout: true, Grace: time.Second, Settle: time.Second})
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 3 || len(we.Failures) != 1 || we.Failures[0].Rank != 3 {
		t.Fatalf("got %v (%+v), want worker rank 3's failure", err, we)
	}
	for _, want := range []string{
		"[rank 2] 2 0 6 2 1 10.9.8.7:29511 " + node.Secret,
		"[rank 3] 3 1 6 2 1 10.9.8.7:29511 " + node.Secret,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in the output:\n%s", want, out.String())
		}
	}
}
