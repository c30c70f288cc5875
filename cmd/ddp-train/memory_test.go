package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// Note [absurd labels] (package dataset): one stray label of 1000000
// among four classes is refused up front, naming it, instead of a model
// of a million classes in every process.
func TestStrayLabelRefused(t *testing.T) {
	dir := t.TempDir()
	x, y := filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")
	const n = 64
	labels := make([]int64, n)
	for i := range labels {
		labels[i] = int64(i % 4)
	}
	labels[7] = 1000000
	writeNPY(t, x, []int{n, 4}, make([]float64, 4*n))
	writeNPY(t, y, []int{n}, labels)
	r := ddpTrain(t, args("--data", x, "--labels", y)...)
	if r.code != 2 || !strings.Contains(r.stderr, "label 1000000 (index 7) is far beyond") ||
		!strings.Contains(r.stderr, "--classes 1000001") || strings.Contains(r.stderr, "worker") {
		t.Fatalf("exit %d, want 2 from the launcher naming the label, its index and --classes\n%s", r.code, r.stderr)
	}
}

var crashRE = regexp.MustCompile(`ddp-train: worker rank 1 crashed: SIGQUIT: quit \(a Go runtime crash, not bad input; the full report is in (\S+/rank-1/crash\.txt)\)`)

// Note [a crash is not bad input]: a worker that dies of the Go runtime
// (here SIGQUIT, whose dump and exit status 2 are a crash's) makes the
// launcher exit 1 with one line naming the report's first line and its
// file, not 2, and its stacks stay off the terminal.
func TestWorkerCrashIsNotBadInput(t *testing.T) {
	run := startTrain(t, args("--steps", "1000000", "--log-every", "10")...)
	run.waitStep(t, 10)
	pid := waitForWorker(t, run.cmd.Process.Pid, "1")
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	code := run.wait(t)
	stderr := run.stderr.String()
	m := crashRE.FindStringSubmatch(stderr)
	if code != 1 || m == nil {
		t.Fatalf("exit %d, want 1 and the crash named\n%s", code, stderr)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(filepath.Dir(m[1]))) })
	if strings.Contains(stderr, "[rank 1] goroutine ") || strings.Contains(stderr, "[rank 1] SIGQUIT") {
		t.Errorf("rank 1's crash report reached the terminal:\n%s", stderr)
	}
	report, err := os.ReadFile(m[1])
	if err != nil || !strings.HasPrefix(string(report), "SIGQUIT: quit") || !strings.Contains(string(report), "goroutine ") {
		t.Errorf("%s: %v, want the runtime's report:\n%.500s", m[1], err, report)
	}
}
