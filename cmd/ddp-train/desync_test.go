package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A worker stopped with SIGSTOP mid-training is named by every other
// rank: each fails with a diagnosis saying rank 2 did not answer (its
// host does, so it is stopped or busy), instead
// of blaming the peer it happened to be waiting on. When the stopped
// rank is 0, which hosts the store, they say the store did not answer
// and name rank 0.
func TestStoppedWorkerIsNamedByEveryRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 worker processes and waits out a timeout")
	}
	t.Run("rank 2", func(t *testing.T) {
		stopWorker(t, "2", []string{"0", "1"}, func(r string) string {
			// The probe finds its port open (pg's Note [network or process]).
			return "pg: rank 2 did not answer (stopped or busy: its host 127.0.0.1 answers, but the process does not respond) " +
				"while rank " + r + " waited in allreduce #"
		})
	})
	t.Run("rank 0, the store's host", func(t *testing.T) {
		stopWorker(t, "0", []string{"1", "2"}, func(r string) string {
			return "pg: the store did not answer (hosted by rank 0: stopped or busy: its host 127.0.0.1 answers, but the " +
				"process does not respond) while rank " + r + " waited in allreduce #"
		})
	})
}

// stopWorker runs ddp-train --nproc 3, stops worker victim once training
// runs, and checks that every survivor's error line contains want(rank).
func stopWorker(t *testing.T, victimRank string, survivors []string, want func(rank string) string) {
	self, _ := os.Executable()
	cmd := exec.Command(self, args("--nproc", "3", "--steps", "1000000", "--timeout", "3s", "--log-every", "1000")...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	victim := waitForWorker(t, cmd.Process.Pid, victimRank)
	defer func() {
		syscall.Kill(victim, syscall.SIGCONT)
		syscall.Kill(victim, syscall.SIGKILL)
	}()
	time.Sleep(time.Second) // let training start
	if err := syscall.Kill(victim, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("ddp-train exited 0 after a worker was stopped")
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("ddp-train still running 60s after a worker was stopped:\n%s", errOut.String())
	}
	out := errOut.String()
	// The launcher's last line names the culprit first (Note [the
	// headline names the culprit]), then repeats a survivor's line.
	last := regexp.MustCompile(`(?m)^ddp-train: rank \d.*$`).FindString(out)
	t.Logf("%s", last)
	if !strings.HasPrefix(last, "ddp-train: rank "+victimRank+" ") ||
		!strings.Contains(last, "check rank "+victimRank+":") {
		t.Fatalf("the launcher's last line does not name rank %s:\n%s\n\nall output:\n%s", victimRank, last, out)
	}
	for _, r := range survivors {
		// Each worker's last line: "[rank R] ddp-train: rank R: ...: pg: rank 2 did not answer (stopped or busy: ...) while
		// rank R waited in allreduce #N; check rank 2: ..."
		re := regexp.MustCompile(`(?m)^.*ddp-train: rank ` + r + `: .*$`)
		line := re.FindString(out)
		if line == "" {
			t.Fatalf("rank %s printed no error line:\n%s", r, out)
		}
		t.Logf("%s", line)
		if !strings.Contains(line, want(r)) || !strings.Contains(line, "check rank "+victimRank+":") {
			t.Fatalf("rank %s does not name rank %s first:\n%s\n\nall output:\n%s", r, victimRank, line, out)
		}
	}
}

// --debug-collectives turns the check on in every worker, over TCP and
// local, and changes nothing in the result: the final parameters are
// bitwise those of a run without it.
func TestDebugCollectivesSameResult(t *testing.T) {
	for _, backend := range []string{"tcp", "local"} {
		t.Run(backend, func(t *testing.T) {
			common := args("--backend", backend, "--nproc", "2", "--steps", "20", "--optimizer", "adam", "--lr", "0.01")
			plain := ddpTrain(t, common...)
			checked := ddpTrain(t, append(common, "--debug-collectives")...)
			if plain.code != 0 || checked.code != 0 {
				t.Fatalf("exit %d and %d\n%s\n%s", plain.code, checked.code, plain.stderr, checked.stderr)
			}
			const on = "every collective is checked across ranks"
			if strings.Contains(plain.stderr, on) || strings.Count(checked.stderr, on) != 2 {
				t.Fatalf("the check is not on in exactly the --debug-collectives run's 2 ranks:\n%s", checked.stderr)
			}
			if p, c := digests(plain.stderr), digests(checked.stderr); len(p) == 0 || p["0"] != c["0"] {
				t.Fatalf("digests %v without the check, %v with it", p, c)
			}
		})
	}
}
