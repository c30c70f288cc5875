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
// rank: each fails with a diagnosis saying rank 2 did not answer, instead
// of blaming the peer it happened to be waiting on.
func TestStoppedWorkerIsNamedByEveryRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 worker processes and waits out a timeout")
	}
	self, _ := os.Executable()
	cmd := exec.Command(self, args("--nproc", "3", "--steps", "1000000", "--timeout", "3s", "--log-every", "1000")...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	victim := waitForWorker(t, cmd.Process.Pid, "2")
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
	for _, r := range []string{"0", "1"} {
		// Each worker's last line: "[rank R] ddp-train: rank R: ...: pg: rank 2 did not answer (stopped or dead) while rank R waited in allreduce #N; check rank 2: ..."
		re := regexp.MustCompile(`(?m)^.*ddp-train: rank ` + r + `: .*$`)
		line := re.FindString(out)
		if line == "" {
			t.Fatalf("rank %s printed no error line:\n%s", r, out)
		}
		if !strings.Contains(line, "pg: rank 2 did not answer (stopped or dead) while rank "+r+" waited in allreduce #") {
			t.Fatalf("rank %s does not name rank 2 first:\n%s\n\nall output:\n%s", r, line, out)
		}
	}
}
