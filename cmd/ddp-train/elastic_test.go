package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/launch"
)

// Elastic restarts and preemption (elastic.go), with real processes and
// real signals.

// liveRun is a ddp-train launcher running in the background.
type liveRun struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan struct{}
	err    error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startTrain(t *testing.T, args ...string) *liveRun {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &liveRun{cmd: exec.Command(self, args...), stderr: &lockedBuffer{}, done: make(chan struct{})}
	r.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	r.cmd.Stderr = r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a process group, as a shell's job
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default:
			r.cmd.Process.Kill() // its workers die with it (Pdeathsig)
			<-r.done
		}
	})
	return r
}

var trainStepRE = regexp.MustCompile(`"msg":"train","step":(\d+)`) // only rank 0 reports

// waitStep waits until rank 0 has logged a step at or past step.
func (r *liveRun) waitStep(t *testing.T, step int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		m := trainStepRE.FindAllStringSubmatch(r.stderr.String(), -1)
		if len(m) > 0 {
			if n, _ := strconv.Atoi(m[len(m)-1][1]); n >= step {
				return
			}
		}
		select {
		case <-r.done:
			t.Fatalf("ddp-train exited before step %d:\n%s", step, r.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("rank 0 did not reach step %d in 20s:\n%s", step, r.stderr.String())
}

// wait returns the launcher's exit code.
func (r *liveRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("ddp-train still running after 30s:\n%s", r.stderr.String())
	}
	if ee, ok := r.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return 0
}

// workerPID finds the child of parent whose environment has every one of
// kvs ("K=V").
func workerPID(t *testing.T, parent int, kvs ...string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	procs:
		for _, st := range stats {
			b, err := os.ReadFile(st)
			if err != nil {
				continue
			}
			fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
			if len(fields) < 2 || fields[0] == "Z" || fields[1] != strconv.Itoa(parent) {
				continue
			}
			env, err := os.ReadFile(filepath.Join(filepath.Dir(st), "environ"))
			if err != nil {
				continue
			}
			vars := strings.Split(string(env), "\x00")
			for _, kv := range kvs {
				found := false
				for _, v := range vars {
					found = found || v == kv
				}
				if !found {
					continue procs
				}
			}
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no worker with %v under pid %d", kvs, parent)
	return 0
}

// sameParams fails unless dirs a and b hold the same .npy files, bitwise.
func sameParams(t *testing.T, a, b string) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(a, "*.npy"))
	if len(names) == 0 {
		t.Fatalf("no parameters in %s", a)
	}
	for _, n := range names {
		x, err1 := os.ReadFile(n)
		y, err2 := os.ReadFile(filepath.Join(b, filepath.Base(n)))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Fatalf("%s differs from the uninterrupted run's (%v, %v)", filepath.Base(n), err1, err2)
		}
	}
}

var stoppingRE = regexp.MustCompile(`"msg":"stopping","rank":(\d+),"signal":"(\w+)","step":(\d+)`)

// A worker SIGKILLed at a random step is restarted with every other one,
// resumes from the newest checkpoint (or from step 0 without one), and
// the run ends with the parameters of an uninterrupted run, bitwise.
func TestRestartAfterKillEqualsUninterrupted(t *testing.T) {
	for _, withCheckpoint := range []bool{true, false} {
		t.Run("checkpoint="+strconv.FormatBool(withCheckpoint), func(t *testing.T) {
			dir := t.TempDir()
			const steps = 2500
			flags := func(name string) []string {
				f := args("--optimizer", "adam", "--lr", "0.01", "--grad-accum", "2", "--steps", strconv.Itoa(steps),
					"--log-every", "10", "--max-restarts", "2", "--restart-backoff", "10ms", "--save", filepath.Join(dir, name))
				if withCheckpoint {
					f = append(f, "--checkpoint", filepath.Join(dir, name+"-ck"), "--checkpoint-every", "50")
				}
				return f
			}
			if r := ddpTrain(t, flags("whole")...); r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			at := 100 + rand.IntN(1000)
			t.Logf("killing rank 1 at about step %d", at)
			run := startTrain(t, flags("killed")...)
			run.waitStep(t, at)
			if err := syscall.Kill(workerPID(t, run.cmd.Process.Pid, "RANK=1", "TORCHELASTIC_RESTART_COUNT=0"),
				syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			code := run.wait(t)
			stderr := run.stderr.String()
			if code != 0 {
				t.Fatalf("exit %d after a restart:\n%s", code, stderr)
			}
			if !regexp.MustCompile(`"msg":"worker failed; restarting every ` +
				`worker","restart":1,"max_restarts":2,"failed_rank":1,"error":"signal: killed"`).MatchString(stderr) {
				t.Fatalf("the restart is not logged:\n%s", stderr)
			}
			resumed := regexp.MustCompile(`\[rank (\d)\] `+
				`.*"msg":"resuming","rank":\d,"step":(\d+)`).FindAllStringSubmatch(stderr, -1)
			if withCheckpoint {
				if len(resumed) != 2 || resumed[0][2] != resumed[1][2] {
					t.Fatalf("want both ranks to resume from the same step, got %v:\n%s", resumed, stderr)
				}
				if s, _ := strconv.Atoi(resumed[0][2]); s%50 != 0 || s == 0 || s > at+50 {
					t.Fatalf("resumed from step %d, killed at about %d", s, at)
				}
			} else {
				if len(resumed) != 0 {
					t.Fatalf("resumed without --checkpoint: %v", resumed)
				}
				if !strings.Contains(stderr, "starts again from step 0") {
					t.Fatalf("no warning that restarts start from step 0:\n%s", stderr)
				}
			}
			sameParams(t, filepath.Join(dir, "whole"), filepath.Join(dir, "killed"))
		})
	}
}

// Once the restarts are spent, ddp-train fails naming the rank.
func TestRestartsExhausted(t *testing.T) {
	run := startTrain(t,
		args("--steps", "1000000", "--log-every", "10", "--max-restarts", "1", "--restart-backoff", "10ms")...)
	for attempt := range 2 {
		run.waitStep(t, 20)
		pid := workerPID(t, run.cmd.Process.Pid, "RANK=1", "TORCHELASTIC_RESTART_COUNT="+strconv.Itoa(attempt))
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if attempt == 0 { // wait for the restart before looking for step 20 again
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(run.stderr.String(), "restarting every worker") && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			run.stderr.mu.Lock()
			run.stderr.b.Reset()
			run.stderr.mu.Unlock()
		}
	}
	code := run.wait(t)
	stderr := run.stderr.String()
	if code != 1 ||
		!regexp.MustCompile(`(?m)^ddp-train: rank 1 died \(killed by SIGKILL\).*; after 1 restart \(--max-restarts `+
			`1\)`).MatchString(stderr) {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	if strings.Contains(stderr, `"restart":2`) {
		t.Fatalf("restarted more than --max-restarts:\n%s", stderr)
	}
}

// SIGTERM or SIGINT, to the launcher or to one worker: every rank stops
// after the same step, the checkpoint holds that step, ddp-train exits
// 128+signal without restarting, and --resume continues to the
// parameters of an uninterrupted run.
func TestPreemption(t *testing.T) {
	cases := []struct {
		name   string
		sig    syscall.Signal
		target string // "launcher", "group" (its process group, as Ctrl-C in a terminal) or a worker's rank
		extra  []string
	}{
		{"SIGTERM to the launcher", syscall.SIGTERM, "launcher", nil},
		{"SIGINT to the launcher", syscall.SIGINT, "launcher", nil},
		{"SIGINT to the launcher's process group", syscall.SIGINT, "group", nil},
		{"SIGTERM to rank 1", syscall.SIGTERM, "1", nil},
		{"SIGTERM to --backend local", syscall.SIGTERM, "launcher", []string{"--backend", "local"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ck := filepath.Join(dir, "ck")
			common := append(args("--optimizer", "adam", "--lr", "0.01", "--log-every", "10"), c.extra...)
			flags := append(common, "--steps", "1000000", "--checkpoint", ck)
			if c.extra == nil { // a restart-enabled launcher must not restart after a signal
				flags = append(flags, "--max-restarts", "2", "--restart-backoff", "10ms")
			}
			run := startTrain(t, flags...)
			run.waitStep(t, 30+rand.IntN(50))
			pid := run.cmd.Process.Pid
			switch c.target {
			case "launcher":
			case "group": // the workers are not in it: they get the signal once, from the launcher
				pid = -pid
			default:
				pid = workerPID(t, pid, "RANK="+c.target)
			}
			if err := syscall.Kill(pid, c.sig); err != nil {
				t.Fatal(err)
			}
			code := run.wait(t)
			stderr := run.stderr.String()
			if code != 128+int(c.sig) {
				t.Fatalf("exit %d, want %d:\n%s", code, 128+int(c.sig), stderr)
			}
			if strings.Contains(stderr, "restarting") {
				t.Fatalf("restarted after a signal:\n%s", stderr)
			}
			stops := stoppingRE.FindAllStringSubmatch(stderr, -1)
			if len(stops) != 2 {
				t.Fatalf("want a stop logged by each of 2 ranks, got %v:\n%s", stops, stderr)
			}
			step, _ := strconv.Atoi(stops[0][3])
			for _, s := range stops {
				if s[3] != stops[0][3] || s[2] != stops[0][2] {
					t.Fatalf("the ranks stopped differently: %v", stops)
				}
			}
			last := strings.TrimSpace(stderr[strings.LastIndex(strings.TrimSpace(stderr), "\n")+1:])
			want := "stopped by " + stops[0][2] + " after step " + stops[0][3] + "; checkpoint written to " + ck
			if !strings.HasPrefix(last, "ddp-train: ") || !strings.Contains(last, want) {
				t.Fatalf("last line %q does not say %q", last, want)
			}
			got, err := checkpoint.Load(ck)
			if err != nil || got.Step != step {
				t.Fatalf("checkpoint: %v, step %v; the ranks stopped after step %d", err, got, step)
			}
			total := strconv.Itoa(step + 20)
			if r := ddpTrain(t, append(common, "--steps", total, "--save", filepath.Join(dir, "whole"))...); r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			if r := ddpTrain(t,
				append(common, "--steps", total, "--checkpoint", ck, "--resume", "--save",
					filepath.Join(dir, "resumed"))...); r.code != 0 {
				t.Fatalf("exit %d\n%s", r.code, r.stderr)
			}
			sameParams(t, filepath.Join(dir, "whole"), filepath.Join(dir, "resumed"))
		})
	}
}

// Before a training loop arms it, a signal cancels the run at once;
// armed, the first signal only asks for a stop, and a second cancels.
func TestInterruptArming(t *testing.T) {
	wait := func(ctx interface{ Done() <-chan struct{} }) bool {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}
	ctx, in := watchSignals(context.Background())
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	var li *launch.Interrupted
	if !wait(ctx) || !errors.As(context.Cause(ctx), &li) || li.Signal != syscall.SIGINT {
		t.Fatalf("unarmed: ctx %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
	in.close()

	ctx, in = watchSignals(context.Background())
	defer in.close()
	in.arm()
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	for in.requested() == 0 {
		time.Sleep(time.Millisecond)
	}
	if in.requested() != syscall.SIGTERM || ctx.Err() != nil {
		t.Fatalf("armed: requested %v, ctx %v", in.requested(), ctx.Err())
	}
	if err := in.interrupted(errors.New("boom")); !errors.As(err, &li) || li.ExitCode() != 143 {
		t.Fatalf("interrupted(boom) = %v", err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	if !wait(ctx) {
		t.Fatal("a second signal did not cancel the run")
	}
}
