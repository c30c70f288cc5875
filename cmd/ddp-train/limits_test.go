package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Note [limits], with real processes: a value no run can use is exit 2
// with one line from the launcher, and no worker starts (a worker's
// lines would come prefixed "[rank N]").
func TestLimitsExitTwoBeforeAnyWorker(t *testing.T) {
	overCPUs := strconv.Itoa(nprocPerCPU*runtime.NumCPU() + 1)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--bucket-cap-mb", "NaN"}, "--bucket-cap-mb NaN: want a size in MiB"},
		{[]string{"--bucket-cap-mb", "Inf"}, "--bucket-cap-mb +Inf"},
		{[]string{"--bucket-cap-mb", "1e30"}, "--bucket-cap-mb 1e+30"},
		{[]string{"--bucket-cap-mb", "1e-12"}, "from 1 byte"},
		{[]string{"--first-bucket-mb", "NaN"}, "--first-bucket-mb NaN"},
		{[]string{"--lr", "NaN"}, "--lr NaN: want a finite number"},
		{[]string{"--lr", "Inf"}, "--lr +Inf"},
		{[]string{"--metrics-addr", "bogus"}, `--metrics-addr "bogus": want host:port`},
		{[]string{"--metrics-addr", "127.0.0.1:65535"}, "would serve on ports 65535 to 65536"},
		{[]string{"--metrics-addr", "no/such:9400"}, "neither an IP address nor a host name"},
		{[]string{"--listen-addr", "bogus"}, `--listen-addr "bogus": want host:port`},
		{[]string{"--listen-addr", ":99999"}, "the port must be a number from 0 to 65535"},
		{[]string{"--nproc", "100000"}, "--nproc 100000: more than 1024"},
		{[]string{"--nproc", "100000", "--oversubscribe"}, "--nproc 100000: more than 1024"},
		{[]string{"--nproc", overCPUs}, "--nproc " + overCPUs + ": more than 8 per CPU"},
		{[]string{"--backend", "local", "--nproc", "2000000000"}, "--nproc 2000000000: more than 1024"},
		{[]string{"--timeout", "10000h"}, "--timeout 10000h0m0s: want at most 168h0m0s"},
		{[]string{"--steps", "0", "--epochs", "9000000000000000000"}, "--epochs 9000000000000000000: want at most"},
		{[]string{"--samples", "2000000000"}, "--samples 2000000000: want at most 67108863"},
		{[]string{"--classes", "-1"}, "--classes -1"},
		{[]string{"--grad-accum", "1000000"}, "--grad-accum 1000000: want at most 65536"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := ddpTrainWithin(t, 10*time.Second, args(append(c.args, "--steps", "3")...)...)
			line := strings.TrimSuffix(r.stderr, "\n")
			if r.code != 2 || strings.Contains(line, "\n") || !strings.HasPrefix(line, "ddp-train: ") ||
				!strings.Contains(line, c.want) {
				t.Fatalf("exit %d, stderr %q: want exit 2 and one line saying %q", r.code, r.stderr, c.want)
			}
		})
	}
}

// ddpTrainWithin is ddpTrain, killed (with its workers, by Pdeathsig)
// after limit: a limit that stops holding (--nproc 100000) fails the test
// instead of forking for ever.
func ddpTrainWithin(t *testing.T, limit time.Duration, args ...string) result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("ddp-train %v still running after %v:\n%s", args, limit, tail(errOut.String()))
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errOut.String()}
}

// A world size from a launcher beyond pg.MaxWorldSize is exit 2 with one
// line naming the variable, not a process that runs out of memory.
func TestHugeWorldSizeExitsTwo(t *testing.T) {
	const secret = "GODDP_SECRET=00112233445566778899aabbccddeeff"
	for name, env := range map[string][]string{
		"WORLD_SIZE": {"RANK=0", "WORLD_SIZE=2000000000", "MASTER_ADDR=127.0.0.1", secret},
		"SLURM_NTASKS": {"SLURM_JOB_ID=7", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=2000000000", "SLURM_LOCALID=0",
			"SLURM_NODEID=0",
			"SLURM_STEP_NODELIST=localhost", "SLURM_STEP_TASKS_PER_NODE=1", secret},
	} {
		t.Run(name, func(t *testing.T) {
			r := runWithEnv(t, cleanEnv(env...), args("--steps", "3")...)
			line := strings.TrimSuffix(r.stderr, "\n")
			if r.code != 2 || strings.Contains(line, "\n") ||
				!strings.Contains(line, name+"=2000000000 is more than the 65536 ranks") {
				t.Fatalf("exit %d, stderr %q: want exit 2 and one line naming %s", r.code, r.stderr, name)
			}
		})
	}
}

// SIGTERM while the launcher is still starting its workers stops it at
// once: it starts no more, kills those it started, and exits 143 with
// none left behind (launch: Note [stopping mid-spawn]).
func TestSignalMidSpawn(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	token := fmt.Sprintf("GODDP_LIMITS_TEST_TOKEN=%d", time.Now().UnixNano())
	// 128 workers take seconds to start on 2 cores, and fit the memory
	// check (Note [memory follows the work]) where maxNproc's would not.
	cmd := exec.Command(self, args("--oversubscribe", "--nproc", "128", "--steps", "3")...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", token)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill() // its workers die with it (Pdeathsig)
			<-done
		}
	}()
	workerPID(t, cmd.Process.Pid, "RANK=3") // spawning
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err = <-done:
		exited = true
	case <-time.After(3 * time.Second):
		t.Fatalf("ddp-train still running 3s after SIGTERM, with %d processes started:\n%s", len(processesWith(token)),
			tail(stderr.String()))
	}
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 143 || !strings.Contains(stderr.String(), "stopped after starting") {
		t.Fatalf("exit %d (%v), want 143 mid-spawn:\n%s", code, err, tail(stderr.String()))
	}
	if left := processesWith(token); len(left) > 0 {
		t.Fatalf("workers %v outlived the launcher: %s", left, describe(left))
	}
	t.Logf("stopped %v after SIGTERM: %s", time.Since(start), strings.TrimSpace(stderr.String()))
}

// processesWith lists the live processes whose environment holds kv.
func processesWith(kv string) []int {
	var pids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) == 0 || f[0] == "Z" {
			continue
		}
		env, err := os.ReadFile(filepath.Join(filepath.Dir(st), "environ"))
		if err != nil || !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+kv+"\x00")) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		pids = append(pids, pid)
	}
	return pids
}

// tail is the last 2000 bytes of s.
func tail(s string) string { return s[max(0, len(s)-2000):] }

// The bounds themselves, on a machine of 2 CPUs, and values at the bounds
// that pass.
func TestCheckLimits(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string // "" for none
	}{
		{[]string{"--nproc", "16"}, ""},
		{[]string{"--nproc", "17"}, "more than 8 per CPU (16 on this machine's 2 CPUs)"},
		{[]string{"--nproc", "17", "--oversubscribe"}, ""},
		{[]string{"--nproc", "1024", "--oversubscribe"}, ""},
		{[]string{"--nproc", "1025", "--oversubscribe"}, "more than 1024"},
		// mpirun's -np decides: Note [no flag is ignored]
		{[]string{"--nproc", "4096", "--backend", "mpi"}, "--nproc does nothing with --backend mpi"},
		{[]string{"--lr", "1e-12"}, ""},
		{[]string{"--lr", "-Inf"}, "want a positive learning rate"},
		{[]string{"--bucket-cap-mb", "1048576", "--first-bucket-mb", "0.000001"}, ""},
		{[]string{"--bucket-cap-mb", "1048577"}, "to 1048576 (1 TiB)"},
		{[]string{"--first-bucket-mb", "0.0000009"}, "--first-bucket-mb 9e-07"},
		{[]string{"--timeout", "168h"}, ""},
		{[]string{"--timeout", "169h"}, "want at most 168h"},
		{[]string{"--steps", strconv.Itoa(maxSteps)}, ""},
		{[]string{"--steps", strconv.Itoa(maxSteps + 1)}, "--steps 1000000000: want at most 999999999"},
		{[]string{"--metrics-addr", "localhost:9400"}, ""},
		{[]string{"--metrics-addr", "[::1]:65534"}, ""},
		{[]string{"--metrics-addr", ":65534", "--nproc", "3"}, "ports 65534 to 65536"},
		{[]string{"--metrics-addr", ":0"}, "worker i serves on port+i"},
		{[]string{"--metrics-addr", ":0", "--backend", "local"}, ""},
		{[]string{"--metrics-addr", ":http"}, "the port must be a number"},
		{[]string{"--metrics-addr", "-bad-:9400"}, "neither an IP address nor a host name"},
		{[]string{"--listen-addr", "0.0.0.0:0"}, ""},
		{[]string{"--listen-addr", "node-1.cluster_a.local:29400"}, ""},
		{[]string{"--listen-addr", "[fe80::1%eth0]:0"}, ""},
		{[]string{"--listen-addr", "10.0.0.1"}, "want host:port"},
		{[]string{"--listen-addr", "a b:1"}, "neither an IP address nor a host name"},
	} {
		c0, err := parseFlags(append(c.args, "--oversubscribe"), io.Discard)
		if err == nil {
			c0.oversubscribe = strings.Contains(strings.Join(c.args, " "), "--oversubscribe")
			err = c0.checkLimits(2)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !isUsage(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: got %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
}

// describe says what processes pids are, for a failure message.
func describe(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		fmt.Fprintf(&b, "\n%s | %s", bytes.TrimSpace(stat), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	}
	return b.String()
}
