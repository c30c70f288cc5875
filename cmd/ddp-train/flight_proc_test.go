package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/pg/flight"
)

// With real worker processes over TCP: SIGUSR1 has every worker dump its
// flight recorder into --flight-dir; rank 2 is then SIGSTOPped, ranks 0
// and 1 time out and dump again; fr-trace names the first collective
// rank 2's dump lacks, and rank 2.
func TestFlightRecorderOfWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 worker processes and waits out a timeout")
	}
	dir := filepath.Join(t.TempDir(), "flight")
	self, _ := os.Executable()
	cmd := exec.Command(self,
		args("--nproc", "3", "--steps", "1000000", "--timeout", "3s", "--log-every", "100000", "--flight-dir", dir)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, r := range []string{"0", "1", "2"} {
		pids = append(pids, waitForWorker(t, cmd.Process.Pid, r))
	}
	defer func() {
		syscall.Kill(pids[2], syscall.SIGCONT)
		syscall.Kill(pids[2], syscall.SIGKILL)
	}()
	time.Sleep(time.Second) // let training start
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
	}
	waitForDumps(t, dir, 3)
	rank2 := filepath.Join(dir, flight.DefaultPrefix+"2")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if fi, err := os.Stat(rank2); err == nil && fi.Size() > 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("rank 2 did not dump on SIGUSR1")
		}
	}
	if err := syscall.Kill(pids[2], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("ddp-train still running 60s after a worker was stopped:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "a collective failed") { // the why of a dump on failure
		t.Errorf("no survivor logged a dump on failure:\n%s", errOut.String())
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"fr-trace", dir}, nil, &stdout, &stderr); code != 1 {
		t.Fatalf("fr-trace exit %d, want 1:\n%s%s", code, stdout.String(), stderr.String())
	}
	t.Logf("%s", stdout.String())
	if !strings.Contains(stdout.String(), "missing ranks: {2}") {
		t.Errorf("fr-trace does not name rank 2:\n%s", stdout.String())
	}
}
