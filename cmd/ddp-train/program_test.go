package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/launch"
)

// buildExample builds examples/multiproc, a module of its own that
// requires goddp through a replace directive, as a user's program would,
// into a temporary directory (its go.mod and go.sum copied there, so the
// checkout is left as it was).
func buildExample(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: no go command to build examples/multiproc with")
	}
	src, err := filepath.Abs("../../examples/multiproc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "multiproc")
	cmd := exec.Command(goTool, "build", "-modfile="+filepath.Join(dir, "go.mod"), "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building examples/multiproc as a module of its own: %v\n%s", err, out)
	}
	return bin
}

var exampleLine = regexp.MustCompile(`rank (\d+) of (\d+): .* params sha256 ([0-9a-f]+)`)

// exampleDigests maps each rank of a world of n to the digest it printed.
func exampleDigests(t *testing.T, launcher, out string, n int) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, m := range exampleLine.FindAllStringSubmatch(out, -1) {
		if m[2] != strconv.Itoa(n) {
			t.Fatalf("%s: a rank of a world of %s, want %d:\n%s", launcher, m[2], n, out)
		}
		got[m[1]] = m[3]
	}
	if len(got) != n {
		t.Fatalf("%s: %d ranks reported, want %d:\n%s", launcher, len(got), n, out)
	}
	return got
}

// A program of one's own (examples/multiproc: another module, joining its
// job with dist.InitProcessGroup and no options) runs unchanged under
// ddp-train --nproc 2, a real torchrun and a real mpirun -np 2, and every
// rank under every launcher ends with bitwise the same parameters.
func TestProgramUnderEveryLauncher(t *testing.T) {
	prog := buildExample(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	port := func() string {
		p, err := launch.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(p)
	}
	runs := map[string][]string{"ddp-train --nproc 2": {self, "--nproc", "2", prog}}
	if py, err := exec.LookPath("/usr/bin/python3"); err == nil &&
		exec.Command(py, "-c", "import torch.distributed.run").Run() == nil {
		runs["torchrun"] = []string{py, "-m", "torch.distributed.run", "--log_dir", t.TempDir(),
			"--redirects", "0:1,1:1", "--tee", "0:1,1:1", // Debian's torchrun 1.13 crashes with the defaults (torchrun_test.go)
			"--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", port(), "--no_python", prog}
	} else {
		t.Log("no torchrun here (apt-get install python3-torch): not run under torchrun")
	}
	if mpirun, err := exec.LookPath("mpirun"); err == nil {
		runs["mpirun -np 2"] = []string{mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
			"-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + port(), "-x", "GODDP_SECRET", prog}
	} else {
		t.Log("no mpirun here (apt-get install openmpi-bin): not run under mpirun")
	}
	want := ""
	for name, argv := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(cleanEnv("GODDP_SECRET="+secret), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out.String())
		}
		for rank, d := range exampleDigests(t, name, out.String(), 2) {
			if want == "" {
				want = d
			}
			if d != want {
				t.Fatalf("%s: rank %s ended at %s, another run or rank at %s:\n%s", name, rank, d, want, out.String())
			}
		}
		t.Logf("%s: both ranks at %s", name, want)
	}
	if len(runs) < 3 {
		t.Logf("ran under %d of 3 launchers", len(runs))
	}
}

// ddp-train PROGRAM refuses what would not reach the program, and a
// program that fails fails the job with its exit code.
func TestProgramLauncherRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--lr", "0.3", "true"}, 2, "--lr is a training flag"},
		{[]string{"--nproc", "2", "/nonexistent/program"}, 2, "cannot run"},
		{[]string{"--nproc", "2", "false"}, 1, "false"},
		{[]string{"--nproc", "2", "true"}, 0, ""},
	} {
		r := ddpTrain(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("ddp-train %s: exit %d, want %d with %q:\n%s", strings.Join(tc.args, " "), r.code, tc.code, tc.want,
				r.stderr)
		}
	}
}
