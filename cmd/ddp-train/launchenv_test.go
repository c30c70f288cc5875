package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg/env"
)

// launcherPrefixes name the variables of launchers (pg/env); a test
// that plays a launcher starts from an environment without any of them.
var launcherPrefixes = []string{"RANK=", "WORLD_SIZE=", "LOCAL_", "GROUP_RANK=", "ROLE_", "MASTER_", "TORCHELASTIC_",
	"OMPI_", "SLURM_", "PET_", "JOB_COMPLETION_INDEX=", "GODDP_SECRET=", workerEnv + "="}

func cleanEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if hasAnyPrefix(kv, launcherPrefixes) {
			continue
		}
		out = append(out, kv)
	}
	return append(append(out, "GORACE=atexit_sleep_ms=0"), extra...)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// runWithEnv runs ddp-train (the test binary as main) with env.
func runWithEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errOut.String()}
}

// A launcher's environment cut short, or two launchers that disagree,
// stop ddp-train with exit 2 and one line naming the variable, before
// any worker or local job starts (no log line, no output).
func TestPartialLauncherEnvExits2(t *testing.T) {
	const secret = "GODDP_SECRET=00112233445566778899aabbccddeeff"
	srun := func(rank int, drop string, extra ...string) []string {
		var kv []string
		for _, v := range []string{"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_PROCID=" + strconv.Itoa(rank),
			"SLURM_NTASKS=2",
			"SLURM_LOCALID=" + strconv.Itoa(rank), "SLURM_NODEID=0", "SLURM_STEP_NODELIST=localhost",
			"SLURM_STEP_TASKS_PER_NODE=2", secret} {
			if !strings.HasPrefix(v, drop+"=") {
				kv = append(kv, v)
			}
		}
		return append(kv, extra...)
	}
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"RANK without WORLD_SIZE", []string{"RANK=0", "MASTER_ADDR=127.0.0.1", secret}, "RANK is set but WORLD_SIZE is not"},
		{"WORLD_SIZE without RANK", []string{"WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", secret},
			"WORLD_SIZE is set but RANK is not"},
		{"MASTER_PORT without MASTER_ADDR", []string{"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=29500", secret},
			"MASTER_PORT is set but MASTER_ADDR is not"},
		{"MASTER_ADDR alone", []string{"MASTER_ADDR=10.0.0.1"},
			"MASTER_ADDR is set but no launcher variables say this process's rank"},
		{"torchrun's agent without RANK",
			[]string{"TORCHELASTIC_RUN_ID=x", "TORCHELASTIC_USE_AGENT_STORE=True", "LOCAL_RANK=0"},
			"TORCHELASTIC_USE_AGENT_STORE is set"},
		{"OMPI rank without size", []string{"OMPI_COMM_WORLD_RANK=0", "MASTER_ADDR=127.0.0.1", secret},
			"OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"},
		{"SLURM_PROCID without SLURM_NTASKS", srun(0, "SLURM_NTASKS"), "SLURM_PROCID is set but SLURM_NTASKS is not"},
		{"SLURM_NTASKS without SLURM_PROCID", srun(0, "SLURM_PROCID"), "SLURM_NTASKS is set but SLURM_PROCID is not"},
		{"srun task without SLURM_LOCALID", srun(1, "SLURM_LOCALID"), "SLURM_LOCALID is not set"},
		{"srun task without a node list", srun(1, "SLURM_STEP_NODELIST"), "SLURM_STEP_NODELIST"},
		{"srun task without a job id", srun(1, "SLURM_JOB_ID"), "SLURM_JOB_ID"},
		{"srun task without a secret", srun(1, "GODDP_SECRET"), "GODDP_SECRET is not set"},
		{"batch script of two tasks", srun(0, "SLURM_STEP_ID"), "SLURM_STEP_ID is not"},
		{"RANK disagrees with SLURM_PROCID", srun(1, "", "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1"),
			"disagree with Slurm's SLURM_PROCID=1"},
		{"RANK disagrees with OMPI",
			[]string{"RANK=1", "WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
				secret},
			"disagree with OMPI_COMM_WORLD_RANK=0"},
		{"malformed node list", srun(1, "SLURM_STEP_NODELIST", "SLURM_STEP_NODELIST=node[1-"), "not closed"},
	}
	for _, tt := range tests {
		for _, backend := range []string{"tcp", "local"} { // neither starts a local job
			t.Run(tt.name+"/"+backend, func(t *testing.T) {
				r := runWithEnv(t, cleanEnv(tt.env...), args("--steps", "3", "--backend", backend)...)
				if r.code != 2 {
					t.Fatalf("exit %d, want 2\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
				}
				line := strings.TrimSuffix(r.stderr, "\n")
				if strings.Contains(line, "\n") || !strings.HasPrefix(line, "ddp-train: ") || !strings.Contains(line, tt.want) {
					t.Fatalf("stderr %q: want one line naming %q", r.stderr, tt.want)
				}
				if r.stdout != "" {
					t.Fatalf("a job ran: stdout %q", r.stdout)
				}
			})
		}
	}
}

// A job started the way srun starts one: two processes with only Slurm's
// variables and GODDP_SECRET. They find the master in the node list and
// the port from the job id, train together, and end equal.
func TestSlurmJob(t *testing.T) {
	jobID, port := slurmJobWithFreePort(t)
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2
	results := make([]result, n)
	var wg sync.WaitGroup
	for r := range n {
		e := cleanEnv("GODDP_SECRET="+secret, "SLURM_JOB_ID="+strconv.FormatUint(jobID, 10), "SLURM_STEP_ID=0",
			"SLURM_PROCID="+strconv.Itoa(r), "SLURM_NTASKS=2", "SLURM_LOCALID="+strconv.Itoa(r), "SLURM_NODEID=0",
			"SLURM_JOB_NODELIST=localhost,othernode[01-03]", "SLURM_STEP_NODELIST=localhost", "SLURM_STEP_TASKS_PER_NODE=2")
		wg.Go(func() { results[r] = runWithEnv(t, e, args("--steps", "5", "--nproc", "7")...) })
	}
	wg.Wait()
	var all string
	for r, res := range results {
		if res.code != 0 {
			t.Fatalf("task %d exited %d:\n%s", r, res.code, res.stderr)
		}
		all += res.stderr
	}
	if want := fmt.Sprintf(`"msg":"store: server listening","addr":"127.0.0.1:%d"`, port); !strings.Contains(all, want) {
		t.Fatalf("rank 0 did not host the store on the port derived from SLURM_JOB_ID=%d (%s):\n%s", jobID, want, all)
	}
	d := digests(all)
	if len(d) != n || d["0"] != d["1"] {
		t.Fatalf("digests %v (want one per rank, equal; --nproc is ignored under srun)\n%s", d, all)
	}
}

// slurmJobWithFreePort picks a job id whose derived store port is free
// on loopback now.
func slurmJobWithFreePort(t *testing.T) (uint64, int) {
	t.Helper()
	for range 100 {
		id := rand.Uint64N(1 << 30)
		port := env.SlurmMasterPort(id)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		return id, port
	}
	t.Fatal("no free port in the Slurm range")
	return 0, 0
}

// A one-task srun step (`srun --ntasks=1 ddp-train --nproc 2`) is a
// single-machine job that ddp-train launches itself; its workers inherit
// the step's Slurm variables and still follow the ranks it gives them.
func TestSlurmOneTaskStepLaunches(t *testing.T) {
	e := cleanEnv("SLURM_JOB_ID=78", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0",
		"SLURM_NODEID=0", "SLURM_STEP_NODELIST=localhost", "SLURM_STEP_TASKS_PER_NODE=1", "SLURM_JOB_NODELIST=localhost")
	r := runWithEnv(t, e, args("--steps", "5", "--nproc", "2")...)
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
	if d := digests(r.stderr); len(d) != 2 || d["0"] != d["1"] {
		t.Fatalf("digests %v: want two workers, equal\n%s", d, r.stderr)
	}
}
