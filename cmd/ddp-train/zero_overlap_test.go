package main

import (
	"bytes"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/ddp/npy"
	"github.com/goddp/ddp/pg"
)

// --zero-overlap steps each bucket as its reduction completes and
// broadcasts it over a group of its own: 3 real processes over tcp, with
// a schedule, gradient accumulation, value clipping, several buckets and
// the replica check,
// end bitwise where the same run without --zero does, in both of torch's
// orders; and an overlapped run checkpointed at step 4 resumes, with the
// overlap, bitwise at the uninterrupted end.
func TestZeroOverlapBitwise(t *testing.T) {
	dir := t.TempDir()
	contractData(t, dir, contractN, contractD, contractClasses)
	common := []string{"--backend", "tcp", "--nproc", "3", "--data", filepath.Join(dir, "X.npy"),
		"--labels", filepath.Join(dir, "y.npy"), "--model", "mlp", "--hidden", "10,7", "--dtype", "float64",
		"--shuffle=false", "--batch-size", strconv.Itoa(contractBatch), "--optimizer", "adamw", "--lr", "0.02",
		"--lr-schedule", "step", "--lr-step-size", "2", "--warmup-steps", "2", "--grad-accum", "2",
		"--clip-grad-value", "0.5", "--bucket-cap-mb", "0.0005", "--first-bucket-mb", "0.0005", "--log-format", "json",
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
		got := run(mode, "--steps", "8", "--zero", "--zero-overlap", mode, "--check-replicas-every", "2",
			"--summary", sum)
		sameArrays(t, "--zero-overlap "+mode, savedArrays(t, got), plain)
		if s := readSummary(t, sum); !s.Zero || s.ZeroOverlap != mode {
			t.Errorf("--zero-overlap %s: the summary says zero %v, zero_overlap %q", mode, s.Zero, s.ZeroOverlap)
		}
	}
	reduced := savedArrays(t, run("reduced", "--steps", "8", "--zero", "--zero-overlap", "interleaved",
		"--zero-reduce-to-owners"))
	closeArrays(t, "--zero-reduce-to-owners", reduced, plain, 1e-12)
	ck := filepath.Join(dir, "ck")
	resumeArgs := []string{"--zero", "--zero-overlap", "interleaved", "--checkpoint", ck, "--checkpoint-every", "4"}
	run("first", slices.Concat(resumeArgs, []string{"--steps", "4"})...)
	sameArrays(t, "resumed with --zero-overlap", savedArrays(t, run("resumed", slices.Concat(resumeArgs,
		[]string{"--steps", "8", "--resume"})...)), plain)
}

// closeArrays requires float64 .npy arrays within tol (relative to the
// largest magnitude) of want's.
func closeArrays(t *testing.T, what string, got, want map[string][]byte, tol float64) {
	t.Helper()
	for name, w := range want {
		a, err := npy.Read(bytes.NewReader(got[name]))
		if err != nil {
			t.Fatalf("%s: %s: %v", what, name, err)
		}
		b, err := npy.Read(bytes.NewReader(w))
		if err != nil {
			t.Fatal(err)
		}
		x, y := pg.View[float64](pg.Tensor{Dtype: pg.Float64, Data: a.Data}),
			pg.View[float64](pg.Tensor{Dtype: pg.Float64, Data: b.Data})
		if len(x) != len(y) {
			t.Fatalf("%s: %s has %d values, want %d", what, name, len(x), len(y))
		}
		var diff, scale float64
		for i := range x {
			diff, scale = max(diff, math.Abs(x[i]-y[i])), max(scale, math.Abs(y[i]))
		}
		if diff > tol*max(scale, 1e-300) {
			t.Errorf("%s: %s is %g from the run without --zero (relative %g), want <= %g", what, name, diff,
				diff/scale, tol)
		}
	}
}

// With --zero-overlap a sample that overflows on rank 0 at step 2
// (overflowData) stops every rank at step 2 with exit 3: named as rank 0's
// by --find-nonfinite-origin (the default), or, without it, by the hook,
// which finds the non-finite average before stepping.
func TestZeroOverlapNonFinite(t *testing.T) {
	for _, c := range []struct {
		origin string
		want   string
	}{
		{"true", "the gradients of rank 0 held a NaN or an infinity"},
		{"false", "averaged gradients are not finite"},
	} {
		t.Run("origin="+c.origin, func(t *testing.T) {
			dir := t.TempDir()
			r := ddpTrain(t, append(args("--epochs", "1", "--steps", "0", "--optimizer", "adam", "--zero",
				"--zero-overlap", "interleaved", "--find-nonfinite-origin="+c.origin), overflowData(t, dir)...)...)
			if r.code != exitDiverged || !strings.Contains(lastLine(r.stderr), "training diverged at step 2") ||
				!strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, last line %q; want exit 3 at step 2 saying %q\n%s", r.code, lastLine(r.stderr), c.want,
					r.stderr)
			}
			for _, rank := range []string{"[rank 0] ddp-train: rank 0:", "[rank 1] ddp-train: rank 1:"} {
				if !hasLine(r.stderr, rank, "training diverged at step 2:") {
					t.Errorf("rank %s did not stop at step 2:\n%s", rank, r.stderr)
				}
			}
		})
	}
}
