package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/ddp/dataset"
)

// savedArrays reads every .npy file of a --save directory, by name.
func savedArrays(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.npy"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no .npy files (%v)", dir, err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

func sameArrays(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d arrays, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Errorf("%s: %s differs from the run without --zero", what, name)
		}
	}
}

// TestZeroBitwise trains 3 ranks with Adam with and without --zero:
// the parameters are bitwise equal. A --zero checkpoint taken at step 6
// resumes on 2 ranks with --zero and without it, each ending bitwise where
// the 2-rank run resumed from the unsharded checkpoint ends.
func TestZeroBitwise(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	dir := t.TempDir()
	contractData(t, dir, contractN, contractD, contractClasses)
	common := []string{"--backend", "tcp", "--data", filepath.Join(dir, "X.npy"),
		"--labels", filepath.Join(dir, "y.npy"), "--model", "mlp", "--hidden", "10,7", "--dtype", "float64",
		"--shuffle=false", "--batch-size", strconv.Itoa(contractBatch), "--optimizer", "adamw", "--lr", "0.02",
		"--log-format", "json", "--timeout", "30s"}
	run := func(name string, args ...string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		r := ddpTrain(t, slices.Concat(common, []string{"--save", out}, args)...)
		if r.code != 0 {
			t.Fatalf("%s: ddp-train %s exited %d\n%s", name, strings.Join(args, " "), r.code, r.stderr)
		}
		return out
	}
	plain := run("plain", "--nproc", "3", "--steps", "12", "--summary", filepath.Join(dir, "plain.json"))
	zero := run("zero", "--nproc", "3", "--steps", "12", "--zero", "--summary", filepath.Join(dir, "zero.json"))
	sameArrays(t, "3 ranks --zero", savedArrays(t, zero), savedArrays(t, plain))
	whole, share := summaryStateBytes(t, filepath.Join(dir, "plain.json")), summaryStateBytes(t, filepath.Join(dir,
		"zero.json"))
	// AdamW: two float64 buffers per value; the MLP 6-10-7-3 has 171
	// values, the largest parameter 70 (10x7).
	if whole != 2*8*int64(contractD*10+10+10*7+7+7*contractClasses+contractClasses) || share <= 0 ||
		share > whole/3+2*8*70 {
		t.Errorf("optimizer_state_bytes: %d without --zero, %d on rank 0 with it; want the whole and a third of it "+
			"within one largest parameter", whole, share)
	}

	ckZero, ckPlain := filepath.Join(dir, "ck-zero"), filepath.Join(dir, "ck-plain")
	run("half-zero", "--nproc", "3", "--steps", "6", "--zero", "--checkpoint", ckZero, "--checkpoint-every", "6")
	run("half-plain", "--nproc", "3", "--steps", "6", "--checkpoint", ckPlain, "--checkpoint-every", "6")
	resume := []string{"--nproc", "2", "--steps", "12", "--resume", "--resume-allow-changes", "world_size"}
	want := savedArrays(t, run("from-plain", slices.Concat(resume, []string{"--checkpoint", ckPlain})...))
	for _, tc := range []struct {
		name string
		zero bool
	}{{"to-zero", true}, {"to-plain", false}} {
		ck := filepath.Join(dir, "ck-"+tc.name)
		if err := os.CopyFS(ck, os.DirFS(ckZero)); err != nil {
			t.Fatal(err)
		}
		args := slices.Concat(resume, []string{"--checkpoint", ck})
		if tc.zero {
			args = append(args, "--zero")
		}
		sameArrays(t, "3 ranks --zero resumed on 2 ("+tc.name+")", savedArrays(t, run(tc.name, args...)), want)
	}
}

// summaryStateBytes reads a --summary file's optimizer_state_bytes.
func summaryStateBytes(t *testing.T, file string) int64 {
	t.Helper()
	return readSummary(t, file).OptimizerStateBytes
}

// With --zero the memory estimate counts each rank's share of the
// optimizer state, so a run whose whole state would not fit a limit is
// not refused for it.
func TestZeroMemoryEstimate(t *testing.T) {
	c, err := parseFlags([]string{"--optimizer", "adam", "--hidden", "256,256"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	info := dataset.Info{N: 64, D: 784, Classes: 10, Shape: []int{784}, Bytes: 64 * 784}
	spec := specFor(c, info)
	whole := estimateMemory(c, info, spec, 1, 4).model
	c.zero = true
	share := estimateMemory(c, info, spec, 1, 4).model
	state := spec.NumParams() * int64(spec.Dtype.Size()) * 2
	if whole-share != state-(state+3)/4 {
		t.Errorf("the estimate with --zero on 4 ranks is %d bytes less, want %d (three quarters of Adam's %d)",
			whole-share, state-(state+3)/4, state)
	}
}
