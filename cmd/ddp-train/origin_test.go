package main

import (
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goddp/ddp/npy"
)

// overflowData is spikyData with every feature of sample 20 at float32's
// largest value: the first layer's sums overflow to an infinity, and
// rank 0's gradients of its second batch (step 2) are not finite.
func overflowData(t *testing.T, dir string) []string {
	t.Helper()
	x := make([]float32, 64*4)
	y := make([]int64, 64)
	for i := range y {
		y[i] = int64(i % 3)
		for j := range 4 {
			x[i*4+j] = float32(math.Sin(float64(i*4+j))) + float32(y[i])
		}
	}
	for j := range 4 {
		x[20*4+j] = math.MaxFloat32
	}
	xp, yp := filepath.Join(dir, "X.npy"), filepath.Join(dir, "y.npy")
	if err := npy.WriteFile(xp, []int{64, 4}, x); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(yp, []int{64}, y); err != nil {
		t.Fatal(err)
	}
	return []string{"--data", xp, "--labels", yp, "--shuffle=false", "--batch-size", "8"}
}

// A sample that overflows on rank 0 at a known step (overflowData: sample
// 20, rank 0's second batch), with the allreduce, fp16 and PowerSGD
// hooks: --find-nonfinite-origin (the default) finds it before the
// allreduce, and every rank stops at step 2 with exit 3 naming rank 0,
// the bucket and the parameters.
func TestNonFiniteOriginNamesTheRankAndStep(t *testing.T) {
	want := regexp.MustCompile(`training diverged at step 2: .*the gradients of rank 0 held a NaN or an infinity before ` +
		`their allreduce \(bucket \d+: [a-z0-9., ]+; sent as zeros`)
	for _, hook := range [][]string{
		{"--comm-hook", "allreduce"},
		{"--comm-hook", "fp16"},
		{"--comm-hook", "powersgd", "--powersgd-start-iter", "2"},
	} {
		t.Run(hook[1], func(t *testing.T) {
			dir := t.TempDir()
			r := ddpTrain(t, append(append(args("--epochs", "1", "--steps", "0"), hook...), overflowData(t, dir)...)...)
			if r.code != exitDiverged || !want.MatchString(lastLine(r.stderr)) {
				t.Fatalf("exit %d, last line %q; want exit 3 naming rank 0 and step 2\n%s", r.code, lastLine(r.stderr), r.stderr)
			}
			for _, rank := range []string{"[rank 0] ddp-train: rank 0:", "[rank 1] ddp-train: rank 1:"} {
				if !hasLine(r.stderr, rank, "training diverged at step 2:", "the gradients of rank 0 held a NaN or an infinity") {
					t.Errorf("no error of rank %s naming rank 0 at step 2 in\n%s", rank, r.stderr)
				}
			}
		})
	}
}

// hasLine reports whether some line of s holds every one of parts.
func hasLine(s string, parts ...string) bool {
	for _, l := range strings.Split(s, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// With --on-nonfinite skip the step is skipped on every rank and the
// origin is logged; with --find-nonfinite-origin=false only the averages
// are checked, and the message cannot name a rank's gradients.
func TestNonFiniteOriginSkipAndOff(t *testing.T) {
	dir := t.TempDir()
	r := ddpTrain(t, append(args("--epochs", "1", "--steps", "0", "--on-nonfinite", "skip"), overflowData(t, dir)...)...)
	if r.code != 0 ||
		!hasLine(r.stderr, "skipping the update", `"step":2`, "the gradients of rank 0 held a NaN or an infinity") {
		t.Fatalf("skip: exit %d; want 0 and a warning naming rank 0 at step 2\n%s", r.code, r.stderr)
	}
	if d := digests(r.stderr); len(d) != 2 || d["0"] != d["1"] {
		t.Errorf("the ranks ended with different parameters: %v", d)
	}
	r = ddpTrain(t,
		append(args("--epochs", "1", "--steps", "0", "--find-nonfinite-origin=false"), overflowData(t, dir)...)...)
	if r.code != exitDiverged || !strings.Contains(lastLine(r.stderr), "the averaged gradients of") {
		t.Fatalf("--find-nonfinite-origin=false: exit %d, last line %q; want exit 3 naming the averages", r.code,
			lastLine(r.stderr))
	}
}
