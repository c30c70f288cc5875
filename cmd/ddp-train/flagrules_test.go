package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/checkpoint"
)

// Note [no flag is ignored], with real processes: a flag the run cannot
// use, or would not act on, is exit 2 with one line from the launcher
// before any worker starts, never a worker that fails on it (exit 1,
// retried by an elastic launcher).
func TestBadFlagsExitTwo(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0") // a port in use
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "1ns"}, "--timeout 1ns: want at least 1s, and at most 168h0m0s"},
		{[]string{"--timeout", "999ms"}, "want at least 1s"},
		{[]string{"--listen-addr", "1.2.3.4:5"}, "--listen-addr 1.2.3.4:5: not an address of this machine"},
		{[]string{"--listen-addr", "127.0.0.1:22", "--nproc", "2"},
			"each of this machine's 2 workers would listen on port 22; give port 0 (127.0.0.1:0)"},
		{[]string{"--listen-addr", busy.Addr().String(), "--nproc", "1"},
			"--listen-addr " + busy.Addr().String() + ": the port is in use"},
		{[]string{"--steps", "5", "--epochs", "2"}, "--steps 5 and --epochs 2: give one of them"},
		{[]string{"--backend", "local", "--listen-addr", "127.0.0.1:0"},
			"--listen-addr does nothing with --backend local: only the tcp backend listens"},
		{[]string{"--backend", "local", "--shm=false"}, "--shm does nothing with --backend local"},
		{[]string{"--backend", "local", "--shm"}, "--shm does nothing with --backend local"},
		{[]string{"--backend", "nccl", "--shm=false"}, "--shm does nothing with --backend nccl"},
		{[]string{"--backend", "mpi", "--nproc", "4"},
			"--nproc does nothing with --backend mpi: mpirun's -np sets the ranks"},
		{[]string{"--backend", "mpi", "--listen-addr", "127.0.0.1:0"}, "--listen-addr does nothing with --backend mpi"},
		{[]string{"--backend", "local", "--max-restarts", "1"}, "--max-restarts"},
		{[]string{"--overwrite-checkpoints"}, "--overwrite-checkpoints needs --checkpoint"},
		{[]string{"--restart-backoff", "2s"}, "--restart-backoff needs --max-restarts"},
		{[]string{"--classes", "3"}, "--classes needs --data: the synthetic set has its own classes"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			r := ddpTrainWithin(t, 20*time.Second, args(append([]string{"--steps", "3"}, c.args...)...)...)
			line := strings.TrimSuffix(r.stderr, "\n")
			if r.code != 2 || strings.Contains(line, "\n") || !strings.HasPrefix(line, "ddp-train: ") ||
				!strings.Contains(line, c.want) {
				t.Fatalf("exit %d, stderr %q: want exit 2 and one line saying %q", r.code, r.stderr, c.want)
			}
		})
	}
}

// --epochs N without --steps trains N epochs, not --steps' default 500:
// 512 samples over 2 ranks in batches of 16 are 16 steps an epoch.
func TestEpochsWithoutSteps(t *testing.T) {
	r := ddpTrain(t, "--hidden", "16", "--samples", "512", "--batch-size", "16", "--log-format", "json", "--timeout",
		"30s", "--epochs", "2")
	if steps := doneSteps(r.stderr); r.code != 0 || steps != "32" {
		t.Fatalf("--epochs 2: exit %d, %s steps; want 0 and 32 steps (2 epochs of 16)\n%s", r.code, steps, tail(r.stderr))
	}
}

// --checkpoint without --checkpoint-every writes one checkpoint, at the
// end, and says so in one line; a resumed run writes its own last step.
// (A signal's checkpoint without --checkpoint-every: TestPreemption.)
func TestCheckpointWithoutEvery(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	r := ddpTrain(t, args("--steps", "3", "--checkpoint", ck)...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr,
		"--checkpoint without --checkpoint-every: one checkpoint, written at the end of the run"); n != 1 {
		t.Errorf("%d lines say when the checkpoint is written, want 1:\n%s", n, r.stderr)
	}
	if ck0, err := checkpoint.Load(ck); err != nil || ck0.Step != 3 {
		t.Fatalf("after --steps 3 --checkpoint: %v, %v; want the checkpoint of step 3", ck0, err)
	}
	if r := ddpTrain(t, args("--steps", "5", "--checkpoint", ck, "--resume")...); r.code != 0 ||
		!strings.Contains(r.stderr, `"msg":"resuming"`) {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	if ck1, err := checkpoint.Load(ck); err != nil || ck1.Step != 5 {
		t.Fatalf("after the resumed run to step 5: %v, %v; want the checkpoint of step 5", ck1, err)
	}
	entries, _ := os.ReadDir(ck)
	t.Logf("%s holds %d entries after the runs", ck, len(entries))
}

// checkListenAddr's own cases, without processes: port 0 is fine for any
// number of workers, a fixed port for one.
func TestCheckListenAddr(t *testing.T) {
	for _, c := range []struct {
		addr    string
		workers int
		want    string
	}{
		{"", 4, ""},
		{"127.0.0.1:0", 4, ""},
		{"127.0.0.1:" + strconv.Itoa(freePort(t)), 1, ""},
		{"127.0.0.1:7", 2, "would listen on port 7"},
		{"192.0.2.1:0", 1, "not an address of this machine"},
	} {
		err := checkListenAddr(c.addr, c.workers)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s × %d: %v", c.addr, c.workers, err)
		case c.want != "" && (err == nil || !isUsage(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s × %d: %v; want a usage error saying %q", c.addr, c.workers, err, c.want)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Under an external launcher, where no launcher of ours checked it, each
// worker tries --listen-addr itself before the rendezvous: a port in use
// (here by the test; in a job, by another rank of the machine) is exit 2
// at once naming it, not exit 1 from the group's listen.
func TestWorkerListenAddrInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	r := runWithEnv(t,
		cleanEnv("MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(freePort(t)), "RANK=1", "WORLD_SIZE=2",
			"GODDP_SECRET=00112233445566778899aabbccddeeff"), args("--steps", "3", "--listen-addr", busy.Addr().String())...)
	if want := "--listen-addr " + busy.Addr().String() + ": the port is in use"; r.code != 2 ||
		!strings.Contains(lastLine(r.stderr), want) {
		t.Fatalf("exit %d, last line %q; want exit 2 saying %q", r.code, lastLine(r.stderr), want)
	}
}
