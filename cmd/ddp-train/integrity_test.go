package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/npy"
)

// The tests of this file are runs that could end "successfully" with
// garbage, or destroy earlier work, each with real processes. Each must
// fail clearly or behave as stated, and nothing may be lost or
// half-written.

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// spikyData writes 64 samples of 4 features, 3 classes, whose sample 20
// has a feature of 1e38 (finite in float32, but it overflows the
// forward pass), and returns the --data and --labels flags.
func spikyData(t *testing.T, dir string) []string {
	t.Helper()
	x := make([]float32, 64*4)
	y := make([]int64, 64)
	for i := range y {
		y[i] = int64(i % 3)
		for j := range 4 {
			x[i*4+j] = float32(math.Sin(float64(i*4+j))) + float32(y[i])
		}
	}
	x[20*4+1] = 1e38
	xp, yp := filepath.Join(dir, "X.npy"), filepath.Join(dir, "y.npy")
	if err := npy.WriteFile(xp, []int{64, 4}, x); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(yp, []int{64}, y); err != nil {
		t.Fatal(err)
	}
	return []string{"--data", xp, "--labels", yp, "--shuffle=false", "--batch-size", "8"}
}

// A learning rate that blows up, and a sample that overflows: the run
// stops with exit 3 naming the step, writes no --save (an earlier one
// stays as it was) and no checkpoint of the diverged step.
func TestNonFiniteGuardFails(t *testing.T) {
	dir := t.TempDir()
	save := filepath.Join(dir, "out")
	if r := ddpTrain(t, args("--steps", "3", "--save", save)...); r.code != 0 {
		t.Fatalf("the first, good run exited %d\n%s", r.code, r.stderr)
	}
	before, err := os.ReadFile(filepath.Join(save, "fc1.weight.npy"))
	if err != nil {
		t.Fatal(err)
	}
	r := ddpTrain(t, args("--steps", "50", "--lr", "1e6", "--save", save)...)
	if r.code != exitDiverged || !strings.Contains(lastLine(r.stderr), "training diverged at step") {
		t.Fatalf("--lr 1e6: exit %d, last line %q; want exit 3 naming the step", r.code, lastLine(r.stderr))
	}
	after, err := os.ReadFile(filepath.Join(save, "fc1.weight.npy"))
	if err != nil || string(after) != string(before) {
		t.Fatalf("a diverged run changed the earlier --save (%v)", err)
	}

	ck := filepath.Join(dir, "ck")
	r = ddpTrain(t,
		append(args("--epochs", "1", "--steps", "0", "--checkpoint", ck, "--checkpoint-every", "1", "--checkpoint-keep",
			"10"), spikyData(t, dir)...)...)
	// Sample 20 is in rank 0's second batch: from step 2 on the run
	// overflows, as the gradients or the loss or at a later step.
	m := regexp.MustCompile(`training diverged at step (\d+): the loss of rank`).FindStringSubmatch(lastLine(r.stderr))
	if r.code != exitDiverged || m == nil {
		t.Fatalf("a sample of 1e38: exit %d, last line %q; want exit 3 naming the step and ranks", r.code, lastLine(r.stderr))
	}
	step, _ := strconv.Atoi(m[1])
	c, _, err := checkpoint.LoadWith(ck, checkpoint.Options{Keep: 10})
	if err != nil || step < 2 || c.Step != step-1 {
		t.Fatalf("diverged at step %d; the newest checkpoint: %v (%v); want step %d, the last good one", step, c, err, step-1)
	}
	for name, v := range c.Params {
		for _, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("the last checkpoint's %s holds %v", name, x)
			}
		}
	}
}

// --on-nonfinite skip skips the update of the step whose gradients
// overflowed, on every rank, counts it, and finishes with finite weights
// and a summary that says so.
func TestNonFiniteGuardSkips(t *testing.T) {
	dir := t.TempDir()
	sum, save := filepath.Join(dir, "s.json"), filepath.Join(dir, "out")
	r := ddpTrain(t,
		append(args("--epochs", "1", "--steps", "0", "--on-nonfinite", "skip", "--summary", sum, "--save", save),
			spikyData(t, dir)...)...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var s summary
	b, err := os.ReadFile(sum)
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil || s.SkippedSteps < 1 || s.Steps != 4 {
		t.Fatalf("summary %+v (%v); want 4 steps, some skipped", s, err)
	}
	if !strings.Contains(r.stderr, "skipping the update") {
		t.Errorf("no warning of the skipped step in\n%s", r.stderr)
	}
	if d := digests(r.stderr); len(d) != 2 || d["0"] != d["1"] {
		t.Errorf("the ranks ended with different parameters: %v", d)
	}
}

// An output path that cannot be written is exit 2 before any worker
// starts, with nothing written: --summary in a missing directory (checked
// late, it would fail after training, with --save written, and be retried
// by --max-restarts), and --checkpoint that is a file (checked late, rank 0
// would fail mid-run, and the launcher would blame rank 1's lost store).
func TestOutputPathsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	save := filepath.Join(dir, "out")
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"summary": {[]string{"--summary", filepath.Join(dir, "missing", "s.json"), "--save", save, "--max-restarts",
			"2"}, "--summary"},
		"checkpoint": {[]string{"--checkpoint", file, "--checkpoint-every", "1", "--save", save},
			"--checkpoint " + file + ": it is a file"},
		"save":          {[]string{"--save", filepath.Join(file, "sub")}, "--save"},
		"summary dir":   {[]string{"--summary", dir}, "it is a directory"},
		"timeline file": {[]string{"--timeline", file}, "--timeline"},
	} {
		t.Run(name, func(t *testing.T) {
			r := ddpTrain(t, args(append([]string{"--steps", "3"}, c.args...)...)...)
			if r.code != 2 || !strings.Contains(lastLine(r.stderr), c.want) || strings.Contains(r.stderr, "[rank ") {
				t.Fatalf("exit %d, stderr\n%s\nwant exit 2 naming %q before any worker started", r.code, r.stderr, c.want)
			}
			if _, err := os.Stat(save); err == nil {
				t.Fatal("--save was written")
			}
		})
	}
}

// A --checkpoint directory that holds another run's checkpoints is not
// touched by a run without --resume: it is refused (pruning would delete
// its step-200 and step-300); --overwrite-checkpoints starts over; a second
// run while one holds the directory is refused at once naming it.
func TestCheckpointDirectoryOwned(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if r := ddpTrain(t,
		args("--steps", "3", "--checkpoint", ck, "--checkpoint-every", "1", "--checkpoint-keep", "3")...); r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	if got := checkpoint.Steps(ck); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("first run left steps %v", got)
	}
	r := ddpTrain(t, args("--steps", "2", "--checkpoint", ck, "--checkpoint-every", "1", "--checkpoint-keep", "3")...)
	if r.code != 2 || !strings.Contains(lastLine(r.stderr), "already holds checkpoints of steps 1, 2, 3") {
		t.Fatalf("a new run into it: exit %d, last line %q; want exit 2", r.code, lastLine(r.stderr))
	}
	if got := checkpoint.Steps(ck); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("the refused run left steps %v", got)
	}
	if r := ddpTrain(t,
		args("--steps", "2", "--checkpoint", ck, "--checkpoint-every", "1", "--checkpoint-keep", "3",
			"--overwrite-checkpoints")...); r.code != 0 {
		t.Fatalf("--overwrite-checkpoints: exit %d\n%s", r.code, r.stderr)
	}
	if got := checkpoint.Steps(ck); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("after starting over: steps %v, want [1 2]", got)
	}

	long := startTrain(t,
		args("--steps", "1000000", "--checkpoint", ck, "--resume", "--checkpoint-every", "100000", "--log-every", "1")...)
	long.waitStep(t, 3) // killed at cleanup
	start := time.Now()
	r = ddpTrain(t, args("--steps", "5", "--checkpoint", ck, "--resume")...)
	if r.code != 2 || !strings.Contains(lastLine(r.stderr), "in use by another run") ||
		!strings.Contains(lastLine(r.stderr), "pid ") || time.Since(start) > 20*time.Second {
		t.Fatalf("a second run on a held directory: exit %d after %v, last line %q; want exit 2 at once naming the holder",
			r.code, time.Since(start), lastLine(r.stderr))
	}
}

// --resume refuses to change what shapes the trajectory, naming every
// field, unless --resume-allow-changes names it; a checkpoint already at
// the steps asked for is "nothing to train", exit 0, with no negative
// figures; a checkpoint whose weights are NaN is refused.
func TestResumeCannotLie(t *testing.T) {
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck")
	if r := ddpTrain(t, args("--steps", "4", "--checkpoint", ck, "--checkpoint-every", "4")...); r.code != 0 {
		t.Fatalf("first run: exit %d\n%s", r.code, r.stderr)
	}
	r := ddpTrain(t,
		args("--steps", "8", "--checkpoint", ck, "--resume", "--batch-size", "8", "--optimizer", "adam", "--nproc", "3")...)
	for _, want := range []string{"world_size: the checkpoint's run had 2, this run has 3", "batch_size", "optimizer",
		"--resume-allow-changes (world_size,batch_size,optimizer)"} {
		if r.code != 2 || !strings.Contains(lastLine(r.stderr), want) {
			t.Fatalf("changed settings: exit %d, last line %q; want exit 2 naming %q", r.code, lastLine(r.stderr), want)
		}
	}
	if r := ddpTrain(t,
		args("--steps", "6", "--checkpoint", ck, "--resume", "--lr", "0.05", "--resume-allow-changes",
			"lr")...); r.code != 0 || !strings.Contains(r.stderr, "resuming with changed settings") {
		t.Fatalf("an allowed change: exit %d\n%s", r.code, r.stderr)
	}
	// Without --checkpoint-every, that run's last step is the checkpoint
	// (Note [no flag is ignored]), and it records the new --lr.
	if c, err := checkpoint.Load(ck); err != nil || c.Step != 6 || c.Meta["lr"] != "0.05" {
		t.Fatalf("after the resumed run: %v, step %v; want the checkpoint of step 6 with lr 0.05", err, c)
	}
	sum := filepath.Join(dir, "s.json")
	r = ddpTrain(t, args("--steps", "3", "--checkpoint", ck, "--resume", "--lr", "0.05", "--summary", sum)...)
	var s summary
	b, err := os.ReadFile(sum)
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if r.code != 0 || !strings.Contains(r.stderr, "nothing to train") || err != nil || s.Steps != 0 ||
		s.SamplesPerSec < 0 {
		t.Fatalf("a finished checkpoint: exit %d, summary %+v (%v)\n%s", r.code, s, err, r.stderr)
	}

	c, _, err := checkpoint.LoadWith(ck, checkpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name := range c.Params {
		c.Params[name][0] = math.NaN()
		break
	}
	if err := checkpoint.Save(ck, c); err != nil {
		t.Fatal(err)
	}
	r = ddpTrain(t, args("--steps", "9", "--checkpoint", ck, "--resume", "--lr", "0.05")...)
	if r.code != 2 || !strings.Contains(lastLine(r.stderr), "holds a NaN or an infinity") {
		t.Fatalf("a checkpoint with NaN weights: exit %d, last line %q; want exit 2", r.code, lastLine(r.stderr))
	}
}

// Under an external launcher (Slurm's variables here) there is no
// launcher of ours to check the outputs: rank 0 finds that --summary
// cannot be written, and every rank exits 2 at once, the others naming
// rank 0, instead of waiting for it until the timeout.
func TestExternalLauncherChecksOutputsOnEveryRank(t *testing.T) {
	jobID, _ := slurmJobWithFreePort(t)
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "missing", "s.json")
	results := make([]result, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range 2 {
		e := cleanEnv("GODDP_SECRET="+secret, "SLURM_JOB_ID="+strconv.FormatUint(jobID, 10), "SLURM_STEP_ID=0",
			"SLURM_PROCID="+strconv.Itoa(r), "SLURM_NTASKS=2", "SLURM_LOCALID="+strconv.Itoa(r), "SLURM_NODEID=0",
			"SLURM_JOB_NODELIST=localhost", "SLURM_STEP_NODELIST=localhost", "SLURM_STEP_TASKS_PER_NODE=2")
		wg.Go(func() { results[r] = runWithEnv(t, e, args("--steps", "5", "--summary", bad)...) })
	}
	wg.Wait()
	if results[0].code != 2 || !strings.Contains(lastLine(results[0].stderr), "--summary") {
		t.Errorf("rank 0: exit %d, last line %q; want 2 naming --summary", results[0].code, lastLine(results[0].stderr))
	}
	if results[1].code != 2 || !strings.Contains(lastLine(results[1].stderr), "rank 0 failed its checks") {
		t.Errorf("rank 1: exit %d, last line %q; want 2 naming rank 0", results[1].code, lastLine(results[1].stderr))
	}
	if d := time.Since(start); d > 20*time.Second { // --timeout is 30s
		t.Errorf("took %v", d)
	}
}

// When rank 0 cannot write a checkpoint mid-run (its directory's parent
// was replaced by a file), rank 1 loses rank 0's store and fails too, and
// often first; the launcher's last line names rank 0's checkpoint error,
// not rank 1's lost store.
func TestLauncherNamesTheCause(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "p")
	ck := filepath.Join(parent, "ck")
	run := startTrain(t,
		args("--steps", "1000000", "--checkpoint", ck, "--checkpoint-every", "300", "--log-every", "1")...)
	run.waitStep(t, 3)
	if err := os.RemoveAll(parent); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(parent, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code := run.wait(t)
	last := lastLine(run.stderr.String())
	if code != 1 || !strings.Contains(last, "worker rank 0 failed") || !strings.Contains(last, "checkpoint at step 300") {
		t.Fatalf("exit %d, last line %q; want rank 0's checkpoint error named", code, last)
	}
}
