package launch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// crashBuffer is a bytes.Buffer that is safe to write from the workers'
// copying goroutines and read when Run has returned.
type crashBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	closed bool
}

func (s *crashBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *crashBuffer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *crashBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Note [a crash report is diverted]: a worker's panic goes to the crash
// writer, stacks and all; Stderr and the tail keep what came before and
// the report's first line.
func TestCrashReportDiverted(t *testing.T) {
	s := spec(t, "panic", 1)
	var stderr syncBuffer
	var crash crashBuffer
	s.Stderr = &stderr
	opened := -1
	s.Crashed = func(rank int) (io.WriteCloser, error) { opened = rank; return &crash, nil }
	err := Run(context.Background(), s)
	var we *WorkerError
	var exit *exec.ExitError
	if !errors.As(err, &we) || !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("got %v, want the worker's exit status 2", err)
	}
	if opened != 0 || !crash.closed || !strings.HasPrefix(crash.String(), "panic: out of cheese") ||
		!strings.Contains(crash.String(), "goroutine ") {
		t.Errorf("crash writer of rank %d (closed %v) holds %q, want the whole report", opened, crash.closed, crash.String())
	}
	if got := stderr.String(); got != "[rank 0] before the crash\n" {
		t.Errorf("stderr holds %q, want only the line before the crash", got)
	}
	if we.Tail != "before the crash\npanic: out of cheese" {
		t.Errorf("tail %q, want the line before and the report's first line", we.Tail)
	}
}

func TestCrashStart(t *testing.T) {
	for line, want := range map[string]bool{
		"panic: boom":                         true,
		"fatal error: out of memory":          true,
		"runtime: out of memory: cannot":      true,
		"runtime/cgo: pthread_create failed":  true,
		"SIGSEGV: segmentation violation":     true,
		"SIGQUIT: quit":                       true,
		"SIG: x":                              false,
		"SIGnal: x":                           false,
		"ddp-train: panic: no":                false,
		"2026-12-01T22:25:53Z\tinfo\tpanic: ": false,
		"goroutine 1 [running]:":              false,
	} {
		if got := crashStart([]byte(line)); got != want {
			t.Errorf("crashStart(%q) = %v, want %v", line, got, want)
		}
	}
}
