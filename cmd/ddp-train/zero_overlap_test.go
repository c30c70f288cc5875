package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// --zero-overlap steps each bucket as its reduction completes and
// broadcasts it over a group of its own: 3 real processes over tcp, with
// a schedule, gradient accumulation, value clipping and several buckets,
// end bitwise where the same run without --zero does, in both of torch's
// orders; and an overlapped run checkpointed at step 4 resumes, with the
// overlap, bitwise at the uninterrupted end.
func TestZeroOverlapBitwise(t *testing.T) {
	dir := t.TempDir()
	contractData(t, dir, contractN, contractD, contractClasses)
	common := []string{"--backend", "tcp", "--nproc", "3", "--data", filepath.Join(dir, "X.npy"),
		"--labels", filepath.Join(dir, "y.npy"), "--model", "mlp", "--hidden", "10,7", "--dtype", "float64",
		"--shuffle=false", "--batch-size", strconv.Itoa(contractBatch), "--optimizer", "adamw", "--lr", "0.02",
		"--lr-schedule", "step", "--lr-step-size", "2", "--warmup-steps", "2", "--grad-accum", "2", "--clip-grad-value", "0.5",
		"--bucket-cap-mb", "0.0005", "--first-bucket-mb", "0.0005", "--log-format", "json",
		"--timeout", "30s"}
	run := func(name string, args ...string) string {
		t.Helper()
		out := filepath.Join(dir, name)
		r := ddpTrain(t, slices.Concat(common, []string{"--save", out}, args)...)
		if r.code != 0 {
			t.Fatalf("%s: ddp-train %s exited %d\n%s", name, strings.Join(args, " "), r.code, r.stderr)
		}
		return out
	}
	plain := savedArrays(t, run("plain", "--steps", "8"))
	for _, mode := range []string{"interleaved", "deferred"} {
		sum := filepath.Join(dir, mode+".json")
		got := run(mode, "--steps", "8", "--zero", "--zero-overlap", mode, "--summary", sum)
		sameArrays(t, "--zero-overlap "+mode, savedArrays(t, got), plain)
		if s := readZeroSummary(t, sum); !s.Zero || s.ZeroOverlap != mode {
			t.Errorf("--zero-overlap %s: the summary says zero %v, zero_overlap %q", mode, s.Zero, s.ZeroOverlap)
		}
	}
	ck := filepath.Join(dir, "ck")
	resumeArgs := []string{"--zero", "--zero-overlap", "interleaved", "--checkpoint", ck, "--checkpoint-every", "4"}
	run("first", slices.Concat(resumeArgs, []string{"--steps", "4"})...)
	sameArrays(t, "resumed with --zero-overlap", savedArrays(t, run("resumed", slices.Concat(resumeArgs,
		[]string{"--steps", "8", "--resume"})...)), plain)
}

// readZeroSummary reads a --summary file.
func readZeroSummary(t *testing.T, file string) summary {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var s summary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}
