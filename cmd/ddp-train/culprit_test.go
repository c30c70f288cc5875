package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The launcher's one line names the rank that was stopped (SIGSTOP) or
// killed, first, whichever worker exited first, over TCP with and
// without shared memory; and the job ends within --timeout plus a few
// seconds, the stopped worker included: Note [the headline names the
// culprit], Note [a stopped worker is killed]. GODDP_CULPRIT_TRIALS sets
// the trials per case (2 by default), for measuring.
func TestCulpritHeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 worker processes per trial and waits out a timeout")
	}
	trials := 2
	if n, err := strconv.Atoi(os.Getenv("GODDP_CULPRIT_TRIALS")); err == nil && n > 0 {
		trials = n
	}
	for _, shm := range []string{"true", "false"} {
		for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
			t.Run(fmt.Sprintf("shm=%s/%v", shm, sig), func(t *testing.T) {
				for i := range trials {
					victim := strconv.Itoa(1 + i%2)
					headline, took, report := culpritRun(t, victim, sig, "--shm="+shm)
					checkCulpritReport(t, report, victim, sig)
					t.Logf("trial %d, rank %s: %.1fs after the signal: %s", i, victim, took.Seconds(), headline)
					want := `^ddp-train: rank ` + victim + ` (stopped responding \(SIGSTOP|died \(killed by SIGKILL)`
					if !regexp.MustCompile(want).MatchString(headline) {
						t.Errorf("trial %d: the headline does not name rank %s first (want %s):\n%s", i, victim, want, headline)
					}
					if took > culpritTimeout+9*time.Second {
						t.Errorf("trial %d: the job ended %v after the signal; want within --timeout %v plus a few seconds", i, took,
							culpritTimeout)
					}
				}
			})
		}
	}
}

// culpritTimeout is the collectives' --timeout in TestCulpritHeadline.
const culpritTimeout = 3 * time.Second

// culpritRun runs ddp-train --nproc 3, sends sig to worker victim once
// training runs, and returns the launcher's last line and how long after
// the signal the launcher ended, and the report directory it named.
func culpritRun(t *testing.T, victim string, sig syscall.Signal, extra ...string) (string, time.Duration, string) {
	self, _ := os.Executable()
	cmd := exec.Command(self,
		args(append([]string{"--nproc", "3", "--steps", "1000000", "--timeout", culpritTimeout.String(), "--log-every",
			"1000000"}, extra...)...)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "TMPDIR="+t.TempDir()) // the report goes there
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := waitForWorker(t, cmd.Process.Pid, victim)
	defer func() {
		syscall.Kill(pid, syscall.SIGCONT)
		syscall.Kill(pid, syscall.SIGKILL)
	}()
	time.Sleep(time.Second) // let training start
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("ddp-train exited 0 after a worker got %v", sig)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("ddp-train still running 60s after a worker got %v:\n%s", sig, errOut.String())
	}
	took := time.Since(start)
	var report string
	if m := regexp.MustCompile(`ddp-train: report: (\S+)`).FindStringSubmatch(errOut.String()); m != nil {
		report = m[1]
	}
	lines := regexp.MustCompile(`(?m)^ddp-train: .*$`).FindAllString(errOut.String(), -1)
	if len(lines) == 0 {
		t.Fatalf("the launcher printed no line:\n%s", errOut.String())
	}
	return lines[len(lines)-1], took, report
}

// checkCulpritReport checks the report directory of a job whose worker
// victim got sig: every rank left its goroutine stacks, a stopped one too
// (the Go runtime's dump on SIGQUIT: Note [a stopped rank's report]),
// and every survivor its state and its flight recorder.
func checkCulpritReport(t *testing.T, report, victim string, sig syscall.Signal) {
	t.Helper()
	if report == "" {
		t.Error("the launcher named no report directory")
		return
	}
	for r := range 3 {
		rank := strconv.Itoa(r)
		if rank == victim && sig == syscall.SIGKILL {
			continue // killed: it wrote nothing
		}
		stacks, err := os.ReadFile(filepath.Join(report, "rank-"+rank, "stacks.txt"))
		if err != nil || !bytes.Contains(stacks, []byte("goroutine ")) {
			t.Errorf("rank %s: no goroutine stacks in the report (%v)", rank, err)
		}
		if rank == victim {
			if !bytes.Contains(stacks, []byte("SIGQUIT")) || !bytes.Contains(stacks, []byte("found stopped")) {
				t.Errorf("rank %s (stopped): its stacks are not the runtime's dump on SIGQUIT:\n%.2000s", rank, stacks)
			}
			continue
		}
		if _, err := os.Stat(filepath.Join(report, "rank-"+rank, "state.json")); err != nil {
			t.Errorf("rank %s: no state in the report: %v", rank, err)
		}
		if dumps, _ := filepath.Glob(filepath.Join(report, "flight", "*_"+rank)); len(dumps) == 0 {
			all, _ := filepath.Glob(filepath.Join(report, "flight", "*"))
			t.Errorf("rank %s: no flight recorder dump in %s/flight (has %v)", rank, report, all)
		}
	}
	// The merge names a stopped victim, whose dump is missing, while the
	// others all wait in one collective: flight.Stalled. (A killed one is
	// not checked: the survivors learn of it at different collectives,
	// from their broken links, so their dumps need not agree.)
	if sig != syscall.SIGSTOP {
		return
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"fr-trace", filepath.Join(report, "flight")}, nil, &stdout, &stderr)
	if want := "missing ranks: {" + victim + "}"; code != 1 || !strings.Contains(stdout.String(), want) {
		t.Errorf("fr-trace of the report: exit %d, want 1 and %q:\n%s%s", code, want, stdout.String(), stderr.String())
	}
}
