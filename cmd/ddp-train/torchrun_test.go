package main

import (
	"bytes"
	"context"
	"math/rand/v2"
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

	"github.com/goddp/ddp/launch"
)

// torchrunPython is the interpreter whose torch provides torchrun:
// $GODDP_TORCH_PYTHON, else Debian's /usr/bin/python3 (python3-torch,
// which scripts/test.sh installs).
func torchrunPython(t *testing.T) string {
	t.Helper()
	py := os.Getenv("GODDP_TORCH_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if out, err := exec.Command(py, "-c", "import torch.distributed.run").CombinedOutput(); err != nil {
		t.Skipf("skipping: %s cannot import torch.distributed.run (%v: %s); install Debian's python3-torch (apt-get "+
			"install -y python3-torch, as scripts/test.sh does) or set GODDP_TORCH_PYTHON", py, err,
			strings.TrimSpace(string(out)))
	}
	return py
}

// TestTorchrun runs ddp-train under a real torchrun (python -m
// torch.distributed.run --no_python), with the static rendezvous (the
// agent serves a c10d TCPStore and sets TORCHELASTIC_USE_AGENT_STORE=True),
// the c10d rendezvous and --standalone. Both ranks must train one job:
// exit 0 and end with the parameters that ddp-train's own launcher gives
// for the same flags.
func TestTorchrun(t *testing.T) {
	py := torchrunPython(t)
	flags := args("--steps", "20")
	ref := ddpTrain(t, append([]string{"--nproc", "2"}, flags...)...)
	if ref.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", ref.code, ref.stderr)
	}
	want := digests(ref.stderr)["0"]
	if want == "" {
		t.Fatalf("reference run printed no digest:\n%s", ref.stderr)
	}
	freePort := func() string {
		p, err := launch.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(p)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rdzv []string
		want string // a line the workers must log
	}{
		{"static", []string{"--master_addr", "127.0.0.1", "--master_port", freePort()},
			`rendezvous through torchrun's agent store`},
		{"c10d", []string{"--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:" + freePort(), "--rdzv_id=goddp-test"}, ""},
		{"standalone", []string{"--standalone"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "standalone" {
				// torchrun --standalone always serves its rendezvous on port 29400.
				l, err := net.Listen("tcp", "127.0.0.1:29400")
				if err != nil {
					t.Skipf("skipping: torchrun --standalone needs port 29400, which is in use: %v", err)
				}
				l.Close()
			}
			secret, err := launch.NewSecret()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmdArgs := []string{"-m", "torch.distributed.run", "--log_dir", t.TempDir(),
				// Debian's torchrun 1.13 crashes under Python 3.11 with the
				// default --redirects/--tee; a per-rank map works.
				"--redirects", "0:1,1:1", "--tee", "0:1,1:1",
				"--nnodes", "1", "--nproc_per_node", "2"}
			cmdArgs = append(cmdArgs, tc.rdzv...)
			cmdArgs = append(append(cmdArgs, "--no_python", self), flags...)
			cmd := exec.CommandContext(ctx, py, cmdArgs...)
			cmd.Env = append(os.Environ(), "GODDP_SECRET="+secret, "GORACE=atexit_sleep_ms=0")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err = cmd.Run()
			log := out.String()
			if err != nil {
				t.Fatalf("torchrun %s: %v after %v\n%s", tc.name, err, time.Since(start).Round(time.Millisecond), log)
			}
			t.Logf("torchrun %s: %v", tc.name, time.Since(start).Round(time.Millisecond))
			d := digests(log)
			if len(d) != 2 || d["0"] != want || d["1"] != want {
				t.Fatalf("final parameter digests %v, want both ranks at %s (ddp-train --nproc 2)\n%s", d, want, log)
			}
			if !strings.Contains(log, `"world_size":2`) {
				t.Fatalf("the workers did not form one 2-rank job:\n%s", log)
			}
			if tc.want != "" && !strings.Contains(log, tc.want) {
				t.Fatalf("no %q in the log:\n%s", tc.want, log)
			}
		})
	}
}

// TestTorchrunRestart: under torchrun --max_restarts 1, a worker SIGKILLed
// at a random step makes the agent restart every worker with
// TORCHELASTIC_RESTART_COUNT=1. They meet afresh under
// goddp/RUN_ID/1 on the agent's store, resume from the newest checkpoint,
// and end with the parameters of an uninterrupted run, bitwise.
func TestTorchrunRestart(t *testing.T) {
	py := torchrunPython(t)
	dir := t.TempDir()
	const steps = 1500
	flags := func(name string) []string {
		return args("--optimizer", "adam", "--lr", "0.01", "--steps", strconv.Itoa(steps), "--log-every", "10",
			"--save", filepath.Join(dir, name), "--checkpoint", filepath.Join(dir, name+"-ck"), "--checkpoint-every", "50")
	}
	if r := ddpTrain(t, append([]string{"--nproc", "2"}, flags("whole")...)...); r.code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s", r.code, r.stderr)
	}
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	port, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	cmdArgs := append([]string{"-m", "torch.distributed.run", "--log_dir", t.TempDir(),
		"--redirects", "0:1,1:1", "--tee", "0:1,1:1", "--nnodes", "1", "--nproc_per_node", "2",
		"--master_addr", "127.0.0.1", "--master_port", strconv.Itoa(port),
		"--max_restarts", "1", "--monitor_interval", "0.2", "--no_python", self}, flags("killed")...)
	run := &liveRun{cmd: exec.Command(py, cmdArgs...), stderr: &lockedBuffer{}, done: make(chan struct{})}
	run.cmd.Env = append(os.Environ(), "GODDP_SECRET="+secret, "GORACE=atexit_sleep_ms=0")
	run.cmd.Stdout, run.cmd.Stderr = run.stderr, run.stderr
	if err := run.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { run.err = run.cmd.Wait(); close(run.done) }()
	t.Cleanup(func() {
		select {
		case <-run.done:
		default:
			run.cmd.Process.Signal(syscall.SIGTERM) // the agent stops its workers
			select {
			case <-run.done:
			case <-time.After(20 * time.Second):
				run.cmd.Process.Kill()
				<-run.done
			}
		}
	})
	at := 100 + rand.IntN(steps/2)
	t.Logf("killing rank 1 at about step %d", at)
	run.waitStep(t, at)
	if err := syscall.Kill(workerPID(t, run.cmd.Process.Pid, "RANK=1", "TORCHELASTIC_RESTART_COUNT=0"),
		syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := run.wait(t); code != 0 {
		t.Fatalf("torchrun exited %d after a restart:\n%s", code, run.stderr.String())
	}
	log := run.stderr.String()
	if n := strings.Count(log, `"prefix":"goddp/none/1/"`); n != 2 {
		t.Fatalf("%d ranks met under goddp/none/1/ after the restart, want 2:\n%s", n, log)
	}
	resumed := regexp.MustCompile(`"msg":"resuming","rank":\d,"step":(\d+)`).FindAllStringSubmatch(log, -1)
	if len(resumed) != 2 || resumed[0][1] != resumed[1][1] {
		t.Fatalf("want both ranks to resume from the same step, got %v:\n%s", resumed, log)
	}
	sameParams(t, filepath.Join(dir, "whole"), filepath.Join(dir, "killed"))
}

// TestTorchrunWithoutSecret: under torchrun's agent store with no
// GODDP_SECRET, every worker stops with exit 2 and says what to export.
func TestTorchrunWithoutSecret(t *testing.T) {
	port, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// The variables torchrun 1.13 sets for a static rendezvous; nothing
	// listens on the port: the check comes first.
	self, _ := os.Executable()
	cmd := exec.Command(self, args("--steps", "1")...)
	cmd.Env = append(os.Environ(), "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "GROUP_RANK=0",
		"TORCHELASTIC_USE_AGENT_STORE=True", "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_RESTART_COUNT=0",
		"TORCHELASTIC_MAX_RESTARTS=0")
	for i, kv := range cmd.Env {
		if strings.HasPrefix(kv, "GODDP_SECRET=") {
			cmd.Env[i] = "GODDP_UNSET_SECRET=1"
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v; want 2\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "GODDP_SECRET") {
		t.Fatalf("the error does not name GODDP_SECRET:\n%s", out.String())
	}
}
