package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/ddp/checkpoint"
	"github.com/goddp/ddp/npy"
)

// The tests of this file are issue 21's table: runs that used to end
// "successfully" with garbage, or destroy earlier work, each with real
// processes. Each now fails clearly or behaves as stated, and nothing is
// lost or half-written.

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
	r = ddpTrain(t, append(args("--epochs", "1", "--steps", "0", "--checkpoint", ck, "--checkpoint-every", "1", "--checkpoint-keep", "10"), spikyData(t, dir)...)...)
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
	r := ddpTrain(t, append(args("--epochs", "1", "--steps", "0", "--on-nonfinite", "skip", "--summary", sum, "--save", save), spikyData(t, dir)...)...)
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
