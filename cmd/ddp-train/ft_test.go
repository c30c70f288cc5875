package main

import (
	"encoding/json"
	"net"
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

// ftRun is a fault-tolerant job started as a process, its stderr
// watched.
type ftRun struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

// ftFlags are a fault-tolerant run's flags for a fast test: short
// timeouts, so that a dead or stopped replica costs a second or two.
func ftTestArgs(dir string, extra ...string) []string {
	return args(append([]string{"--fault-tolerant", "--ft-timeout", "2s", "--ft-join-timeout", "300ms",
		"--ft-heartbeat-timeout", "1s", "--restart-backoff", "200ms", "--log-every", "25", "--ft-ordered-sum",
		"--ft-record", filepath.Join(dir, "record.jsonl"), "--summary", filepath.Join(dir, "summary.json")},
		extra...)...)
}

func startFT(t *testing.T, env []string, a ...string) *ftRun {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &ftRun{t: t, cmd: exec.Command(self, a...), stderr: &syncBuffer{}, done: make(chan error, 1)}
	r.cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	r.cmd.Stderr = r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if p := os.Getenv("GODDP_FT_TEST_LOG"); p != "" && t.Failed() { // the whole log of a failed run
			_ = os.WriteFile(p, []byte(r.stderr.String()), 0o644)
		}
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) // the launcher and every replica
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
		}
	})
	return r
}

var ftTrainStepRE = regexp.MustCompile(`"msg":"train".*?"step":(\d+)`)

// waitStep waits until some replica has logged a train line at step at
// least n.
func (r *ftRun) waitStep(n int) {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-r.done:
			r.done <- err
			r.t.Fatalf("the job ended (%v) before step %d:\n%s", err, n, tail(r.stderr.String()))
		default:
		}
		for _, m := range ftTrainStepRE.FindAllStringSubmatch(r.stderr.String(), -1) {
			if s, _ := strconv.Atoi(m[1]); s >= n {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("no replica reached step %d:\n%s", n, tail(r.stderr.String()))
}

// wait waits for the job's end and returns its exit code.
func (r *ftRun) wait() int {
	r.t.Helper()
	select {
	case err := <-r.done:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		} else if err != nil {
			r.t.Fatal(err)
		}
		return 0
	case <-time.After(3 * time.Minute):
		r.t.Fatalf("the fault-tolerant job did not end:\n%s", tail(r.stderr.String()))
	}
	return -1
}

func readFTSummary(t *testing.T, path string) summary {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkReplay replays the run's record in one process and compares the
// digests: bitwise, with --ft-ordered-sum.
func checkReplay(t *testing.T, dir string, s summary, steps string) {
	t.Helper()
	rs := filepath.Join(dir, "replay.json")
	res := ddpTrain(t, args("--fault-tolerant", "--ft-replay", filepath.Join(dir, "record.jsonl"), "--steps", steps,
		"--summary", rs)...)
	if res.code != 0 {
		t.Fatalf("--ft-replay exited %d:\n%s", res.code, res.stderr)
	}
	got := readFTSummary(t, rs)
	if got.ParamDigest != s.ParamDigest || got.StateDigest != s.StateDigest || got.Steps != s.Steps ||
		s.StateDigest == "" {
		t.Errorf("the replay of %d steps ends at digests %s/%s; the replicas at %s/%s after %d", got.Steps,
			got.ParamDigest, got.StateDigest, s.ParamDigest, s.StateDigest, s.Steps)
	}
}

// TestFaultTolerantSurvivesFailures: a replica SIGKILLed, another
// SIGSTOPped past the step timeout and continued; the job goes on without
// restarting the others, the killed one is started again and heals, and
// the replicas end bitwise equal to a one-process replay of the committed
// steps.
func TestFaultTolerantSurvivesFailures(t *testing.T) {
	dir := t.TempDir()
	r := startFT(t, nil, ftTestArgs(dir, "--nproc", "3", "--min-replicas", "1", "--steps", "3000")...)
	pid := r.cmd.Process.Pid
	r.waitStep(200)
	if err := killProcess(waitForChild(t, pid, ftReplicaEnv+"=replica_1")); err != nil {
		t.Fatal(err)
	}
	r.waitStep(500)
	stopped := waitForChild(t, pid, ftReplicaEnv+"=replica_2")
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // past --ft-timeout: the others discard the step and go on without it
	if err := syscall.Kill(stopped, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(r.stderr.String()))
	}
	s := readFTSummary(t, filepath.Join(dir, "summary.json"))
	// Whether the others discard a step depends on where the signals land:
	// a replica killed or stopped while the others wait for a quorum costs
	// them a heartbeat timeout and no step (the harness's
	// TestFaultsFailedAllReduceDiscardsEverywhere pins discards down).
	if s.ReplicaRestarts < 1 || s.ReplicasFinished < 2 || s.CommittedSteps < 1 {
		t.Errorf("restarts %d, finished %d, committed %d: want a restart and two replicas at the end",
			s.ReplicaRestarts, s.ReplicasFinished, s.CommittedSteps)
	}
	if log := r.stderr.String(); !strings.Contains(log, `"msg":"recovered"`) ||
		!strings.Contains(log, "a replica died; starting it again") {
		t.Errorf("no recovery or no restart in the log:\n%s", tail(log))
	}
	checkReplay(t, dir, s, "3000")
}

// TestFaultTolerantLighthouseRestart: the lighthouse SIGKILLed mid-run and
// started again on its port; the replicas re-register, nobody restarts,
// and every step is committed.
func TestFaultTolerantLighthouseRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := []string{"GODDP_SECRET=" + testLighthouseSecret}
	lighthouse := func() *ftRun {
		return startFT(t, env, "lighthouse", "--listen", addr, "--min-replicas", "1", "--join-timeout", "300ms",
			"--heartbeat-timeout", "1s")
	}
	lh := lighthouse()
	dir := t.TempDir()
	r := startFT(t, env, ftTestArgs(dir, "--nproc", "2", "--lighthouse", addr, "--steps", "1200")...)
	r.waitStep(300)
	if err := syscall.Kill(lh.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-lh.done
	time.Sleep(time.Second) // the replicas' quorum requests fail and retry
	lighthouse()
	if code := r.wait(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(r.stderr.String()))
	}
	s := readFTSummary(t, filepath.Join(dir, "summary.json"))
	if s.ReplicaRestarts != 0 || s.ReplicasFinished != 2 {
		t.Errorf("restarts %d, finished %d: a lighthouse restart must cost no replica", s.ReplicaRestarts,
			s.ReplicasFinished)
	}
	checkReplay(t, dir, s, "1200")
}

func TestFaultTolerantRefuses(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--fault-tolerant", "--zero"}, "--fault-tolerant with --zero"},
		{[]string{"--fault-tolerant", "--backend", "local"}, "needs --backend tcp"},
		{[]string{"--fault-tolerant", "--checkpoint", t.TempDir()}, "--fault-tolerant with --checkpoint"},
		{[]string{"--ft-record", "x"}, "--ft-record does nothing without --fault-tolerant"},
		{[]string{"--min-replicas", "2"}, "--min-replicas does nothing without --fault-tolerant"},
	} {
		res := ddpTrain(t, args(c.flags...)...)
		if res.code != 2 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", c.flags, res.code, c.want, res.stderr)
		}
	}
}

// TestFaultTolerantDiLoCo: DiLoCo's outer step as a transaction (Note
// [DiLoCo as a transaction]): a replica SIGKILLed mid-run is restarted and
// heals the global parameters and the outer optimizer, and every replica
// ends on one set of global parameters (the launcher compares the digests)
// with every batch in exactly one committed round.
func TestFaultTolerantDiLoCo(t *testing.T) {
	dir := t.TempDir()
	a := ftTestArgs(dir, "--nproc", "3", "--min-replicas", "1", "--steps", "2500", "--diloco-sync-every", "5",
		"--optimizer", "adam", "--lr", "0.001")
	r := startFT(t, nil, a...)
	r.waitStep(100) // early: a restarted process under the race detector and a loaded CI takes seconds to join
	if err := killProcess(waitForChild(t, r.cmd.Process.Pid, ftReplicaEnv+"=replica_1")); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(); code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(r.stderr.String()))
	}
	s := readFTSummary(t, filepath.Join(dir, "summary.json"))
	if s.ReplicaRestarts < 1 || s.ReplicasFinished < 2 || s.Steps != 2500 {
		t.Errorf("restarts %d, finished %d, steps %d: want a restart, two replicas at the end and 2500 steps",
			s.ReplicaRestarts, s.ReplicasFinished, s.Steps)
	}
	b, err := os.ReadFile(filepath.Join(dir, "record.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 500 || !strings.Contains(string(b), `"batches_each":5`) {
		t.Errorf("the record has %d rounds, want 500 of 5 batches each", n)
	}
	if !ftHealedRE.MatchString(r.stderr.String()) {
		t.Errorf("the restarted replica never recovered a later round:\n%s", tail(r.stderr.String()))
	}
}

// ftHealedRE is replica_1 recovering a round after the first.
var ftHealedRE = regexp.MustCompile(`"msg":"recovered","replica_id":"replica_1","step":[1-9]`)
