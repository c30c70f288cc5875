package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// zeroFeature is one case of TestZeroWithFeatures: extra flags for both
// runs, and what else the case checks in the summaries.
type zeroFeature struct {
	name     string
	nproc    int
	args     []string
	overflow bool                          // overflowData (float32, rank 0's step 2 overflows) instead of contractData
	differs  bool                          // the flags change the result: it ends elsewhere than allreduce at nproc
	check    func(t *testing.T, s summary) // each run's summary, with and without --zero
}

func zeroFeatures() []zeroFeature {
	skipped := func(t *testing.T, s summary) {
		t.Helper()
		if s.SkippedSteps < 1 {
			t.Errorf("skipped_steps %d: the overflowing step was not skipped", s.SkippedSteps)
		}
	}
	return []zeroFeature{
		{name: "allreduce", nproc: 3, args: []string{"--comm-hook", "allreduce"}},
		{name: "allreduce-2", nproc: 2, args: []string{"--comm-hook", "allreduce"}},
		{name: "fp16", nproc: 3, differs: true, args: []string{"--comm-hook", "fp16"}},
		{name: "bf16", nproc: 3, differs: true, args: []string{"--comm-hook", "bf16"}},
		{name: "powersgd", nproc: 3, differs: true,
			args: []string{"--comm-hook", "powersgd", "--powersgd-start-iter", "2"}},
		{name: "batched-powersgd", nproc: 3, differs: true,
			args: []string{"--comm-hook", "batched-powersgd", "--powersgd-start-iter", "2"}},
		{name: "hierarchical", nproc: 3, args: []string{"--comm-hook", "hierarchical"}},
		{name: "adasum", nproc: 2, differs: true, args: []string{"--comm-hook", "adasum"}}, // a power of two of ranks
		{name: "grad-accum", nproc: 3, args: []string{"--grad-accum", "3"}},
		{name: "powersgd-grad-accum", nproc: 3,
			args: []string{"--comm-hook", "powersgd", "--powersgd-start-iter", "2", "--grad-accum", "2"}},
		{name: "replicas-every-step", nproc: 3, args: []string{"--check-replicas-every", "1"}},
		{name: "bucket-view-clip", nproc: 3, differs: true,
			args: []string{"--gradient-as-bucket-view", "--clip-grad-norm", "0.01"}},
		{name: "nonfinite-skip", nproc: 2, overflow: true, check: skipped,
			args: []string{"--on-nonfinite", "skip", "--hidden", "16", "--dtype", "float32"}},
		{name: "nonfinite-skip-fp16-accum", nproc: 2, overflow: true, check: skipped,
			args: []string{"--on-nonfinite", "skip", "--hidden", "16", "--dtype", "float32", "--comm-hook", "fp16",
				"--grad-accum", "2"}},
	}
}

// TestZeroWithFeatures: ddp-train --zero ends bitwise where the same run
// without it ends, with every comm hook that averages (allreduce, fp16,
// bf16, PowerSGD and its batched form while compressing, hierarchical,
// Adasum; each hook that changes the numbers is checked to end elsewhere
// than allreduce, so it acted), with gradient accumulation (alone, and
// with PowerSGD), with gradients as bucket views and clipped, with the
// replica check every step, and with --on-nonfinite skip on a run whose
// gradients overflow at step 2. Every case runs the replica check every
// second step, and the --zero run's summary says zero. The noop hook,
// which leaves each rank its own gradients, is refused with --zero
// (TestZeroRefusesNoop).
func TestZeroWithFeatures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	dir := t.TempDir()
	contractData(t, dir, contractN, contractD, contractClasses)
	contract := []string{"--data", filepath.Join(dir, "X.npy"), "--labels", filepath.Join(dir, "y.npy"), "--hidden",
		"10,7", "--dtype", "float64", "--shuffle=false", "--batch-size", strconv.Itoa(contractBatch)}
	allreduce := map[int]map[string][]byte{} // by nproc, the allreduce case's parameters
	for _, tc := range zeroFeatures() {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			data := contract
			if tc.overflow {
				data = overflowData(t, sub)
			}
			common := slices.Concat([]string{"--backend", "tcp", "--nproc", strconv.Itoa(tc.nproc), "--model", "mlp",
				"--optimizer", "adamw", "--lr", "0.02", "--steps", "6", "--check-replicas-every", "2", "--log-format",
				"json", "--timeout", "30s"}, data, tc.args)
			run := func(name string, extra ...string) (map[string][]byte, summary) {
				t.Helper()
				out, sum := filepath.Join(sub, name), filepath.Join(sub, name+".json")
				r := ddpTrain(t, slices.Concat(common, []string{"--save", out, "--summary", sum}, extra)...)
				if r.code != 0 {
					t.Fatalf("%s: ddp-train exited %d\n%s", name, r.code, r.stderr)
				}
				return savedArrays(t, out), readSummary(t, sum)
			}
			plainArrays, plain := run("plain")
			zeroArrays, zero := run("zero", "--zero")
			sameArrays(t, tc.name+" --zero", zeroArrays, plainArrays)
			if tc.name == "allreduce" || tc.name == "allreduce-2" {
				allreduce[tc.nproc] = plainArrays
			}
			if base := allreduce[tc.nproc]; tc.differs && (base == nil || equalArrays(plainArrays, base)) {
				t.Errorf("%s ended where allreduce does (or allreduce did not run): the hook did not act", tc.name)
			}
			if !zero.Zero || plain.Zero {
				t.Errorf("summary zero: %v with --zero, %v without", zero.Zero, plain.Zero)
			}
			if zero.OptimizerStateBytes <= 0 || zero.OptimizerStateBytes >= plain.OptimizerStateBytes {
				t.Errorf("optimizer_state_bytes %d with --zero, %d without: want a share", zero.OptimizerStateBytes,
					plain.OptimizerStateBytes)
			}
			if zero.SkippedSteps != plain.SkippedSteps {
				t.Errorf("skipped_steps %d with --zero, %d without", zero.SkippedSteps, plain.SkippedSteps)
			}
			if tc.check != nil {
				tc.check(t, plain)
				tc.check(t, zero)
			}
		})
	}
}

// equalArrays reports whether two --save directories' arrays are bitwise
// equal.
func equalArrays(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

// readSummary reads a --summary file.
func readSummary(t *testing.T, file string) summary {
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

// TestZeroRefusesNoop: the noop hook leaves each rank its own gradients,
// so --zero would step each parameter with its owner's alone (a mixture
// of the ranks' runs, neither one's); the run is refused before any
// worker starts, naming both flags.
func TestZeroRefusesNoop(t *testing.T) {
	r := ddpTrain(t, args("--steps", "2", "--zero", "--comm-hook", "noop")...)
	if r.code != 2 || !strings.Contains(lastLine(r.stderr), "--zero") ||
		!strings.Contains(lastLine(r.stderr), "--comm-hook noop") || strings.Contains(r.stderr, "[rank ") {
		t.Fatalf("exit %d, stderr\n%s\nwant exit 2 naming --zero and --comm-hook noop before any worker started", r.code,
			r.stderr)
	}
}
