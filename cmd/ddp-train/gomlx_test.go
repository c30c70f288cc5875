package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/dataset"
	"github.com/goddp/ddp/launch"
	"github.com/goddp/ddp/npy"
)

// trainLosses reads rank 0's "train" lines (--log-format json) from a
// run's stderr: the loss at each logged step.
func trainLosses(t *testing.T, stderr string) []float64 { return logFloats(t, stderr, "train", "loss") }

// evalLosses reads rank 0's "eval" lines: the held-out loss at each.
func evalLosses(t *testing.T, stderr string) []float64 {
	return logFloats(t, stderr, "eval", "eval_loss")
}

// logFloats reads field of every json log line with message msg.
func logFloats(t *testing.T, stderr, msg, field string) []float64 {
	t.Helper()
	var out []float64
	for _, line := range strings.Split(stderr, "\n") {
		i := strings.Index(line, "{")
		if i < 0 || !strings.Contains(line, `"msg":"`+msg+`"`) {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line[i:]), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		v, ok := rec[field].(float64)
		if !ok {
			t.Fatalf("%q: no number %s", line, field)
		}
		out = append(out, v)
	}
	return out
}

// TestEngineGoMLXMatchesGorgonia: ddp-train with --engine gomlx and with
// the Gorgonia engine, the same flags (model, seed, data, ranks,
// micro-batches, optimizer, schedule, clipping, ZeRO, DiLoCo, held-out
// evaluation), log the same loss curve and the same held-out losses,
// within 1e-9: the engines compute the same gradients in another order,
// and the rest (reducer, optimizer, schedule) is one implementation (Note
// [engines]). The fp16 comm hook rounds the gradients to half precision,
// where a last-bit difference can round the other way: 1e-6 there.
func TestEngineGoMLXMatchesGorgonia(t *testing.T) {
	mnist := mnistDir(t) // mnist_test.go
	file := func(name string) string { return filepath.Join(mnist, name) }
	heldOut := mnistSubset(t, file("t10k-images-idx3-ubyte.gz"), file("t10k-labels-idx1-ubyte.gz"), 400)
	for _, c := range []struct {
		name string
		tol  float64
		args []string
	}{
		{"tcp-sgd-accum", 1e-9, []string{"--nproc", "2", "--optimizer", "sgd", "--lr", "0.1", "--grad-accum", "2"}},
		{"local-adam", 1e-9, []string{"--backend", "local", "--nproc", "3", "--optimizer", "adam", "--lr", "0.01"}},
		{"adamw-cosine-clip", 1e-9, []string{"--nproc", "2", "--optimizer", "adamw", "--lr", "0.01", "--lr-schedule",
			"cosine", "--warmup-steps", "3", "--clip-grad-norm", "0.5"}},
		{"momentum-nesterov", 1e-9, []string{"--nproc", "2", "--optimizer", "momentum", "--nesterov", "--weight-decay",
			"0.01"}},
		{"zero-overlap", 1e-9, []string{"--nproc", "2", "--optimizer", "adam", "--lr", "0.01", "--zero",
			"--zero-overlap", "interleaved"}},
		{"diloco", 1e-9, []string{"--nproc", "2", "--optimizer", "adamw", "--lr", "0.01", "--diloco-sync-every", "4"}},
		{"cnn-mnist-eval", 1e-9, []string{"--nproc", "2", "--model", "cnn", "--optimizer", "adam", "--lr", "0.001",
			"--data", file("train-images-idx3-ubyte.gz"), "--labels", file("train-labels-idx1-ubyte.gz"),
			"--eval-data", heldOut.x, "--eval-labels", heldOut.y, "--eval-every", "6", "--batch-size", "8"}},
		{"fp16-bucket-view", 1e-6,
			[]string{"--nproc", "2", "--optimizer", "sgd", "--lr", "0.1", "--comm-hook", "fp16", "--gradient-as-bucket-view",
				"--bucket-cap-mb", "0.01"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			common := args(append([]string{"--steps", "12", "--log-every", "1", "--dtype", "float64", "--activation", "tanh"},
				c.args...)...)
			curves, evals := map[string][]float64{}, map[string][]float64{}
			for _, engine := range []string{"gorgonia", "gomlx"} {
				r := ddpTrain(t, append(common, "--engine", engine)...)
				if r.code != 0 {
					t.Fatalf("--engine %s: exit %d\n%s", engine, r.code, r.stderr)
				}
				curves[engine], evals[engine] = trainLosses(t, r.stderr), evalLosses(t, r.stderr)
				if d := digests(r.stderr); len(d) < 2 || !sameDigests(d, len(d)) {
					t.Fatalf("--engine %s: final parameter digests %v, want one per rank, equal\n%s", engine, d, r.stderr)
				}
			}
			want, got := curves["gorgonia"], curves["gomlx"]
			if len(want) != 12 || len(got) != 12 || len(evals["gomlx"]) != len(evals["gorgonia"]) {
				t.Fatalf("%d and %d train lines, want 12 each; %d and %d eval lines", len(want), len(got),
					len(evals["gorgonia"]), len(evals["gomlx"]))
			}
			if slices.Contains(c.args, "--eval-data") && len(evals["gomlx"]) != 2 {
				t.Fatalf("%d eval lines, want 2 (steps 6 and 12)", len(evals["gomlx"]))
			}
			closeCurves(t, "loss", want, got, c.tol)
			closeCurves(t, "held-out loss", evals["gorgonia"], evals["gomlx"], c.tol)
		})
	}
}

// mnistSubset writes the first n samples of an MNIST set as .npy files
// ([n, 1, 28, 28] features scaled as ddp-train scales MNIST's, and labels):
// a held-out set small enough to score twice per run under -race.
func mnistSubset(t *testing.T, images, labels string, n int) struct{ x, y string } {
	t.Helper()
	ds, err := dataset.Load(images, labels, 10)
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	x, y := make([]float64, n*ds.D), make([]int, n)
	ds.Gather(idx, x, y)
	y64 := make([]int64, n)
	for i, c := range y {
		y64[i] = int64(c)
	}
	dir := t.TempDir()
	out := struct{ x, y string }{filepath.Join(dir, "x.npy"), filepath.Join(dir, "y.npy")}
	if err := npy.WriteFile(out.x, append([]int{n}, ds.Shape...), toFloat32(x)); err != nil {
		t.Fatal(err)
	}
	if err := npy.WriteFile(out.y, []int{n}, y64); err != nil {
		t.Fatal(err)
	}
	return out
}

// closeCurves fails t where got[i] is not within tol (relative, or
// absolute below 1) of want[i].
func closeCurves(t *testing.T, what string, want, got []float64, tol float64) {
	t.Helper()
	for s := range want {
		if d := math.Abs(got[s] - want[s]); !(d <= tol*max(1, math.Abs(want[s]))) {
			t.Errorf("line %d: %s %.12f with GoMLX, %.12f with Gorgonia (diff %.3g)", s+1, what, got[s], want[s], d)
		}
	}
}

// TestEngineGoMLXRefuses: what --engine gomlx cannot do is refused at the
// command line, naming the flag and why; so are --engine gomlx's own
// flags without it.
func TestEngineGoMLXRefuses(t *testing.T) {
	for _, c := range [][]string{
		{"--find-unused-parameters", "--engine", "gomlx"},
		{"--static-graph", "--engine", "gomlx"},
		{"--fault-tolerant", "--engine", "gomlx"},
		{"--mixed-precision", "float16", "--engine", "gomlx"},
		{"--reduce-dtype", "float32", "--engine", "gomlx"},
		{"--dropout", "1", "--engine", "gomlx"},
		{"--dropout", "0.5"},
		{"--mixed-precision", "bfloat16"},
		{"--engine", "torch"},
	} {
		r := ddpTrain(t, args(append([]string{"--steps", "1"}, c...)...)...)
		if r.code != 2 || !strings.Contains(r.stderr, strings.TrimPrefix(c[0], "--")) {
			t.Errorf("%v: exit %d\n%s", c, r.code, r.stderr)
		}
	}
}

// TestEngineGoMLXNonFinite: gradients that overflow stop the run, naming
// them, or with --on-nonfinite skip, skip the update and go on, as with
// the Gorgonia engine.
func TestEngineGoMLXNonFinite(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // where the failed run leaves its report
	common := args("--engine", "gomlx", "--nproc", "2", "--steps", "4", "--lr", "1e30")
	r := ddpTrain(t, common...)
	if r.code == 0 || !strings.Contains(r.stderr, "not finite") {
		t.Errorf("overflowing gradients: exit %d\n%s", r.code, r.stderr)
	}
	r = ddpTrain(t, append(common, "--on-nonfinite", "skip")...)
	if r.code != 0 || !strings.Contains(r.stderr, "skipping the update") {
		t.Errorf("--on-nonfinite skip: exit %d\n%s", r.code, r.stderr)
	}
}

// TestTorchrunEngineGoMLX runs ddp-train --engine gomlx under a real
// torchrun (static rendezvous, TestTorchrun's first case): both workers
// must train one 2-rank job with GoMLX (AdamW, a cosine schedule and
// per-rank dropout) and end with bitwise the parameters that ddp-train's
// own launcher gives for the same flags.
func TestTorchrunEngineGoMLX(t *testing.T) {
	py := torchrunPython(t)
	flags := args("--engine", "gomlx", "--steps", "12", "--dtype", "float64", "--optimizer", "adamw", "--lr", "0.01",
		"--dropout", "0.2", "--lr-schedule", "cosine")
	ref := ddpTrain(t, append([]string{"--nproc", "2"}, flags...)...)
	if ref.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", ref.code, ref.stderr)
	}
	want := digests(ref.stderr)["0"]
	if want == "" {
		t.Fatalf("reference run printed no digest:\n%s", ref.stderr)
	}
	port, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{"-m", "torch.distributed.run", "--log_dir", t.TempDir(),
		"--redirects", "0:1,1:1", "--tee", "0:1,1:1", // see TestTorchrun
		"--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", strconv.Itoa(port),
		"--no_python", self}, flags...)...)
	cmd.Env = append(os.Environ(), "GODDP_SECRET="+secret, "GORACE=atexit_sleep_ms=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	log := out.String()
	if err != nil {
		t.Fatalf("torchrun: %v after %v\n%s", err, time.Since(start).Round(time.Millisecond), log)
	}
	t.Logf("torchrun: %v", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(log, `"world_size":2`) || strings.Count(log, `"msg":"done"`) != 2 ||
		strings.Count(log, `"engine":"gomlx"`) < 2 {
		t.Fatalf("the workers did not train one 2-rank job with --engine gomlx:\n%s", log)
	}
	if d := digests(log); len(d) != 2 || d["0"] != want || d["1"] != want {
		t.Fatalf("final parameter digests %v, want both ranks at %s (ddp-train --nproc 2)\n%s", d, want, log)
	}
}

// sameDigests reports whether d holds n ranks' digests, all equal.
func sameDigests(d map[string]string, n int) bool {
	if len(d) != n {
		return false
	}
	for _, v := range d {
		if v != d["0"] {
			return false
		}
	}
	return true
}
