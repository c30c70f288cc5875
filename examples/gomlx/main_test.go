package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
	"go.uber.org/goleak"
)

// TestMain makes this test binary a worker rank when launched as one,
// as the program itself is.
func TestMain(m *testing.M) {
	if os.Getenv(workerMarker) == "1" {
		c, err := parseFlags(os.Args[1:])
		if err != nil {
			os.Exit(2)
		}
		os.Exit(workerMain(c, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}

var report = regexp.MustCompile(`^ranks (\d+), loss ([0-9.]+) -> ([0-9.]+), test accuracy ([0-9.]+)% \(chance 25%\), ` +
	`params ([0-9a-f]{64}), replicas identical\n$`)

// job launches n worker processes of this binary, as the program's
// --nproc does, and returns rank 0's report: first loss, last loss,
// accuracy.
func job(t *testing.T, n int, args ...string) (first, last, acc float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := launch.Self(ctx, n, args, workerMarker+"=1", &out, os.Stderr); err != nil {
		t.Fatalf("%d processes: %v", n, err)
	}
	m := report.FindStringSubmatch(out.String())
	if m == nil || m[1] != strconv.Itoa(n) {
		t.Fatalf("%d processes reported %q", n, out.String())
	}
	vals := make([]float64, 3)
	for i := range vals {
		vals[i], _ = strconv.ParseFloat(m[2+i], 64)
	}
	return vals[0], vals[1], vals[2] / 100
}

// TestProcesses: 2 and 3 worker processes, launched as ddp-train
// launches them, each joining with dist.InitProcessGroup over tcp, train
// the MLP to well above chance with bitwise-identical replicas (each
// rank checks; a difference fails the job).
func TestProcesses(t *testing.T) {
	for _, n := range []int{2, 3} {
		first, last, acc := job(t, n, "--steps", "120", "--batch", "48")
		if last > first/2 || acc < 0.6 {
			t.Errorf("%d processes: loss %.4f -> %.4f, accuracy %.2f: the model did not learn", n, first, last, acc)
		}
	}
}

// TestCheckpointResume: a second job resumes from the GoMLX checkpoint
// rank 0 saved (and DDP copied to the other ranks): its first loss is
// where the first job ended, not where it began.
func TestCheckpointResume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	args := []string{"--steps", "60", "--batch", "48", "--checkpoint", dir}
	first, last, _ := job(t, 2, args...)
	again, _, _ := job(t, 2, args...)
	if again > (first+last)/2 {
		t.Errorf("the resumed job starts at loss %.4f; the first went %.4f -> %.4f", again, first, last)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Error(fmt.Errorf("no checkpoint: %w", err))
	}
}
