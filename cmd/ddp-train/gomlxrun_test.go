package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goddp/ddp/model"
	"gorgonia.org/tensor"
)

// TestEngineGoMLXResume: an --engine gomlx run with dropout, AdamW and
// micro-batches, checkpointed at step 7 and resumed, ends bitwise equal to
// the run that never stopped; its outputs are the Gorgonia engine's
// (--save's model card and arrays, which --init reads back bitwise,
// --summary naming the engine, --timeline's per-rank traces).
func TestEngineGoMLXResume(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	common := args("--engine", "gomlx", "--optimizer", "adamw", "--lr", "0.01", "--grad-accum", "2", "--dropout", "0.3",
		"--dtype", "float64")
	if r := ddpTrain(t, append(common, "--steps", "12", "--save", at("whole"), "--summary", at("sum.json"),
		"--timeline", at("tl"))...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	r := ddpTrain(t, append(common, "--steps", "7", "--checkpoint", at("ck"), "--checkpoint-every", "7")...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	r = ddpTrain(t, append(common, "--steps", "12", "--checkpoint", at("ck"), "--resume", "--save", at("resumed"))...)
	if r.code != 0 || !strings.Contains(r.stderr, `"msg":"resuming"`) {
		t.Fatalf("exit %d, or no resume\n%s", r.code, r.stderr)
	}
	sameFiles(t, at("whole"), at("resumed"), "the resumed run differs from the uninterrupted one")
	if r := ddpTrain(t, append(common, "--steps", "0", "--init", at("whole"), "--save", at("again"))...); r.code != 0 {
		t.Fatalf("--init: exit %d\n%s", r.code, r.stderr)
	}
	sameFiles(t, at("whole"), at("again"), "--init then --save changed the parameters")
	var scores [][]float64 // ddp-train eval of the saved model, scored by each engine
	for _, engine := range []string{"gorgonia", "gomlx"} {
		r := ddpTrain(t, "eval", "--engine", engine, "--init", at("whole"), "--backend", "local", "--log-format", "json")
		if scores = append(scores, evalLosses(t, r.stderr)); r.code != 0 || len(scores[len(scores)-1]) != 1 {
			t.Fatalf("ddp-train eval --engine %s: exit %d\n%s", engine, r.code, r.stderr)
		}
	}
	closeCurves(t, "ddp-train eval's loss", scores[0], scores[1], 1e-9)
	var sum summary
	if b, err := os.ReadFile(at("sum.json")); err != nil || json.Unmarshal(b, &sum) != nil || sum.Engine != "gomlx" ||
		sum.Dropout != 0.3 || sum.Steps != 12 {
		t.Errorf("summary %+v (%v)", sum, err)
	}
	for _, rank := range []string{"rank-0.json", "rank-1.json"} {
		if b, err := os.ReadFile(filepath.Join(at("tl"), rank)); err != nil || !bytes.Contains(b, []byte(`"bucket 0"`)) ||
			bytes.Count(b, []byte(`"name":"step"`)) < 24 {
			t.Errorf("--timeline %s: %d bytes, no bucket or fewer than 24 micro-batch slices (%v)", rank, len(b), err)
		}
	}
}

// sameFiles fails t unless a and b hold the same files with the same bytes.
func sameFiles(t *testing.T, a, b, why string) {
	t.Helper()
	names, err := os.ReadDir(a)
	if err != nil || len(names) < 3 {
		t.Fatalf("%s: %d files (%v)", a, len(names), err)
	}
	for _, n := range names {
		x, _ := os.ReadFile(filepath.Join(a, n.Name()))
		y, _ := os.ReadFile(filepath.Join(b, n.Name()))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s: %s", n.Name(), why)
		}
	}
}

// TestGoMLXDropoutPerRank: on the same parameters and the same batch, the
// dropout masks (seen through the loss) differ between ranks and between
// micro-batches, and repeat for the same seed, rank and micro-batch; a
// run with --dropout repeats bitwise, and differs from one without.
func TestGoMLXDropoutPerRank(t *testing.T) {
	spec := model.Spec{Kind: "mlp", InputShape: []int{6}, Hidden: []int{16}, Activation: "relu", Classes: 3,
		Dtype: tensor.Float64, Batch: 4}
	net, err := newGoMLXNet(spec, config{gomlxFlags: gomlxFlags{dropout: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := model.NewParams(spec, 1)
	if err != nil {
		t.Fatal(err)
	}
	exec := compileProgram(t, net.program)
	x := make([]float64, 4*6)
	for i := range x {
		x[i] = float64(i%7) / 3
	}
	loss := func(seed int64, rank, m int) float64 {
		in := append(paramArgs(p), net.batch(x, 4), net.labels([]int{0, 1, 2, 1}), dropoutState(seed, rank, m))
		outs, err := exec.Exec(in...)
		if err != nil {
			t.Fatal(err)
		}
		defer finalizeAll(outs)
		l, err := scalarOf(outs[0])
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	base := loss(1, 0, 0)
	if loss(1, 0, 0) != base {
		t.Error("the same seed, rank and micro-batch drew another mask")
	}
	for _, c := range []struct {
		what          string
		seed          int64
		rank, microID int
	}{{"rank 1", 1, 1, 0}, {"micro-batch 1", 1, 0, 1}, {"seed 2", 2, 0, 0}} {
		if loss(c.seed, c.rank, c.microID) == base {
			t.Errorf("%s drew rank 0's mask of micro-batch 0 (loss %v)", c.what, base)
		}
	}
	common := args("--engine", "gomlx", "--steps", "6", "--dtype", "float64")
	runs := map[string]string{}
	for _, name := range []string{"a", "b", "none"} {
		flags := append(common, "--dropout", "0.4")
		if name == "none" {
			flags = common
		}
		r := ddpTrain(t, flags...)
		if d := digests(r.stderr); r.code != 0 || !sameDigests(d, 2) {
			t.Fatalf("exit %d, digests %v\n%s", r.code, d, r.stderr)
		}
		runs[name] = digests(r.stderr)["0"]
	}
	if runs["a"] != runs["b"] || runs["a"] == runs["none"] {
		t.Errorf("digests %v: want two equal runs with --dropout, and another without", runs)
	}
}

// TestEngineGoMLXMixedPrecision: --mixed-precision bfloat16 computes and
// reduces bfloat16 gradients of float32 parameters (the reducer's
// MixedPrecision hook), keeps every rank bitwise equal, and follows the
// float32 loss curve of --engine gorgonia to bfloat16's precision;
// --reduce-dtype float32 reduces in float32, which changes the bits.
func TestEngineGoMLXMixedPrecision(t *testing.T) {
	common := args("--steps", "30", "--log-every", "5", "--optimizer", "adam", "--lr", "0.01")
	ref := ddpTrain(t, append(common, "--engine", "gorgonia")...)
	if ref.code != 0 {
		t.Fatalf("exit %d\n%s", ref.code, ref.stderr)
	}
	want := trainLosses(t, ref.stderr)
	got := map[string]string{}
	for _, reduce := range []string{"", "float32"} {
		flags := append(common, "--engine", "gomlx", "--mixed-precision", "bfloat16")
		if reduce != "" {
			flags = append(flags, "--reduce-dtype", reduce)
		}
		r := ddpTrain(t, flags...)
		if d := digests(r.stderr); r.code != 0 || !sameDigests(d, 2) ||
			!strings.Contains(r.stderr, `"comm_hook":"mixed_precision`) {
			t.Fatalf("--reduce-dtype %q: exit %d, digests %v\n%s", reduce, r.code, d, r.stderr)
		}
		got[reduce] = digests(r.stderr)["0"]
		closeCurves(t, "bfloat16 loss", want, trainLosses(t, r.stderr), 3e-2)
	}
	if got[""] == got["float32"] {
		t.Errorf("--reduce-dtype float32 ended with the bits of bfloat16 reduction: %v", got)
	}
}

// TestGoMLXPerLayerBitwise: --gomlx-programs per-layer runs the same
// arithmetic as one program, split at the layers (Note [backward in
// several programs]), so it ends with the same bits, through dropout,
// micro-batches, several buckets and gradients in their buckets.
func TestGoMLXPerLayerBitwise(t *testing.T) {
	common := args("--engine", "gomlx", "--steps", "8", "--dtype", "float64", "--dropout", "0.3", "--grad-accum", "2",
		"--bucket-cap-mb", "0.001", "--optimizer", "adam", "--lr", "0.01", "--log-every", "1")
	for _, view := range []bool{false, true} {
		flags := common
		if view {
			flags = append(flags, "--gradient-as-bucket-view")
		}
		var got []string
		var curves [][]float64
		for _, programs := range []string{"one", "per-layer"} {
			r := ddpTrain(t, append(flags, "--gomlx-programs", programs)...)
			if d := digests(r.stderr); r.code != 0 || !sameDigests(d, 2) {
				t.Fatalf("--gomlx-programs %s: exit %d, digests %v\n%s", programs, r.code, d, r.stderr)
			}
			got, curves = append(got, digests(r.stderr)["0"]), append(curves, trainLosses(t, r.stderr))
		}
		if got[0] != got[1] || len(curves[0]) != 8 {
			t.Errorf("--gradient-as-bucket-view %v: one program ends at %s, per layer at %s", view, got[0], got[1])
		}
		closeCurves(t, "per-layer loss", curves[0], curves[1], 0)
	}
}
