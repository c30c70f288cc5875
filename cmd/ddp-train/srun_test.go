package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/pg/env"
)

// The tests below run only where a Slurm cluster answers. One node is
// enough; on Debian 12 (Slurm 22.05):
//
//	apt-get install -y slurmctld slurmd slurm-client munge
//	# /etc/slurm/slurm.conf: SlurmctldHost=$(hostname), SlurmUser=root,
//	# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none,
//	# SelectType=select/cons_tres, SlurmdParameters=config_overrides,
//	# NodeName=$(hostname) CPUs=8, PartitionName=debug Nodes=ALL Default=YES
//	munged --force; slurmctld -i; slurmd
//
// slurmOrSkip skips the test unless a Slurm cluster answers here (srun
// and sbatch on PATH, sinfo reporting an idle or mixed node).
func slurmOrSkip(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Slurm jobs")
	}
	for _, tool := range []string{"srun", "sbatch", "sinfo"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no Slurm here: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sinfo", "-h", "-o", "%t").Output()
	if err != nil || !strings.Contains(string(out), "idle") && !strings.Contains(string(out), "mix") {
		t.Skipf("no Slurm node is available: %q %v", out, err)
	}
}

var storePortRE = regexp.MustCompile(`"msg":"store: server listening","addr":"[^"]*:(\d+)"`)

// Under a real srun, each task is one rank: the tasks find rank 0 and
// the port from Slurm's variables alone and end equal.
func TestUnderSrun(t *testing.T) {
	slurmOrSkip(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 3
	cmd := exec.CommandContext(ctx, "srun", "--ntasks", strconv.Itoa(n), "--kill-on-bad-exit=1", "--output", "none",
		"--error", "all",
		"bash", "-c", `echo "job $SLURM_JOB_ID" >&2; exec "$0" "$@"`, self)
	cmd.Args = append(cmd.Args, args("--steps", "10", "--nproc", "5")...)
	cmd.Env = cleanEnv("GODDP_SECRET=" + secret)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	d := digests(string(out))
	if len(d) != n || d["0"] != d["1"] || d["0"] != d["2"] {
		t.Fatalf("digests %v: want %d, equal\n%s", d, n, out)
	}
	job := regexp.MustCompile(`job (\d+)`).FindSubmatch(out)
	port := storePortRE.FindSubmatch(out)
	if job == nil || port == nil {
		t.Fatalf("no job id or store port in the output:\n%s", out)
	}
	id, _ := strconv.ParseUint(string(job[1]), 10, 64)
	if want := strconv.Itoa(env.SlurmMasterPort(id)); string(port[1]) != want {
		t.Fatalf("store on port %s, want %s from SLURM_JOB_ID=%d", port[1], want, id)
	}
}

// Run in the batch script of a job of several tasks, without srun,
// ddp-train refuses with exit 2 instead of training alone.
func TestSbatchWithoutSrunExits2(t *testing.T) {
	slurmOrSkip(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	log := filepath.Join(dir, "job.out")
	body := fmt.Sprintf("#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --output=%s\n%q %s\n", log, self,
		strings.Join(args("--steps", "5"), " "))
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sbatch", "--wait", script)
	cmd.Env = cleanEnv("GODDP_SECRET=00112233445566778899aabbccddeeff")
	out, err := cmd.CombinedOutput()
	b, _ := os.ReadFile(log)
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("sbatch --wait: %v, want exit 2\n%s\n%s", err, out, b)
	}
	if !strings.Contains(string(b), "SLURM_STEP_ID is not: this is Slurm's batch script") ||
		strings.Contains(string(b), `"msg":"done"`) {
		t.Fatalf("job output:\n%s", b)
	}
}

// Launchers nest: torchrun started by srun (one agent per task, two
// workers each), and mpirun in a batch script. The innermost launcher's
// variables win over the Slurm variables the workers inherit, without a
// conflict, and the job is one job of every worker.
func TestNestedUnderSlurm(t *testing.T) {
	slurmOrSkip(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	train := strings.Join(args("--steps", "5"), " ")
	t.Run("srun torchrun", func(t *testing.T) {
		if exec.Command("/usr/bin/python3", "-c", "import torch.distributed.run").Run() != nil {
			t.Skip("no torchrun: apt-get install python3-torch")
		}
		port, err := launch.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		logs := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Debian's torchrun 1.13 needs explicit --redirects/--tee (docs/launchers.md).
		script := fmt.Sprintf(`exec /usr/bin/python3 -m torch.distributed.run --nnodes 2 --node_rank $SLURM_PROCID `+
			`--master_addr 127.0.0.1 --master_port %d `+
			`--nproc_per_node 2 --log_dir %s/$SLURM_PROCID --redirects 0:1,1:1 --tee 0:1,1:1 --no_python %q %s`, port, logs,
			self, train)
		cmd := exec.CommandContext(ctx, "srun", "--ntasks", "2", "--kill-on-bad-exit=1", "bash", "-c", script)
		cmd.Env = cleanEnv("GODDP_SECRET=" + secret)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("srun torchrun: %v\n%s", err, out)
		}
		if d := digests(string(out)); len(d) != 4 || d["0"] != d["1"] || d["0"] != d["2"] || d["0"] != d["3"] {
			t.Fatalf("digests %v: want 4, equal\n%s", d, out)
		}
	})
	t.Run("mpirun in sbatch", func(t *testing.T) {
		if _, err := exec.LookPath("mpirun"); err != nil {
			t.Skip("no mpirun: apt-get install openmpi-bin")
		}
		dir := t.TempDir()
		script, log := filepath.Join(dir, "job.sh"), filepath.Join(dir, "job.out")
		body := fmt.Sprintf("#!/bin/bash\n#SBATCH --ntasks=3\n#SBATCH --output=%s\n"+
			"mpirun --allow-run-as-root --oversubscribe -np 3 -x GODDP_SECRET -x %s -x MASTER_ADDR=127.0.0.1 %q %s\n",
			log, asMain, self, train)
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sbatch", "--wait", script)
		cmd.Env = cleanEnv("GODDP_SECRET=" + secret)
		out, err := cmd.CombinedOutput()
		b, _ := os.ReadFile(log)
		if err != nil {
			t.Fatalf("sbatch --wait: %v\n%s\n%s", err, out, b)
		}
		if d := digests(string(b)); len(d) != 3 || d["0"] != d["1"] || d["0"] != d["2"] {
			t.Fatalf("digests %v: want 3, equal\n%s", d, b)
		}
	})
}
