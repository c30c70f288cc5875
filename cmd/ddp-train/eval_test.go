package main

import (
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/ddp/dataset"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// heldOut writes n samples of the synthetic problem, drawn with a seed of
// their own (a fair held-out set), as X.npy [n,d] float64 and y.npy [n]
// int64 in dir, and returns their paths. d other than
// dataset.SyntheticD keeps the first d features (a set the model cannot
// take); labels other than n keeps that many labels.
func heldOut(t *testing.T, dir string, n, d, labels int) (x, y string) {
	t.Helper()
	ds := dataset.Synthetic(77, n)
	feats := make([]float64, 0, n*d)
	row := make([]float64, ds.D)
	for i := range n {
		ds.Row(i, row)
		feats = append(feats, row[:d]...)
	}
	ys := make([]int64, labels)
	for i := range ys {
		ys[i] = int64(ds.Y[i%n])
	}
	x, y = filepath.Join(dir, "X.npy"), filepath.Join(dir, "y.npy")
	writeNPY(t, x, []int{n, d}, feats)
	writeNPY(t, y, []int{labels}, ys)
	return x, y
}

// evalFigures is a summary's held-out figures.
type evalFigures struct {
	Loss     *float64 `json:"eval_loss"`
	Accuracy *float64 `json:"eval_accuracy"`
	Samples  int      `json:"eval_samples"`
	Step     *int     `json:"eval_step"`
}

func readEvalSummary(t *testing.T, path string) evalFigures {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f evalFigures
	if err := json.Unmarshal(b, &f); err != nil || f.Loss == nil || f.Accuracy == nil {
		t.Fatalf("%s: no eval figures (%v):\n%s", path, err, b)
	}
	return f
}

// sameEval fails unless b's figures are a's: the loss to 1e-12, relative,
// the accuracy and the samples exactly.
func sameEval(t *testing.T, what string, a, b evalFigures) {
	t.Helper()
	if math.Abs(*a.Loss-*b.Loss) > 1e-12*math.Abs(*a.Loss) || *a.Accuracy != *b.Accuracy || a.Samples != b.Samples {
		t.Errorf("%s: eval_loss %v eval_accuracy %v samples %d, want %v %v %d", what, *b.Loss, *b.Accuracy, b.Samples,
			*a.Loss, *a.Accuracy, a.Samples)
	}
}

var evalLineRE = regexp.MustCompile(`"msg":"eval","step":(\d+),"eval_loss":[^,]+,"eval_accuracy":[^,]+,"samples":\d+`)

// evalSteps are the steps of rank 0's "eval" lines.
func evalSteps(stderr string) []int {
	var steps []int
	for _, m := range evalLineRE.FindAllStringSubmatch(stderr, -1) {
		s, _ := strconv.Atoi(m[1])
		steps = append(steps, s)
	}
	return steps
}

// A run with --eval-data ends with bitwise the parameters of the same run
// without it, evaluates after each epoch and the last step (16 steps an
// epoch: 512 samples, 2 ranks, batch 16) or every --eval-every steps, and
// `ddp-train eval` on its --save output, or its checkpoint, gives the
// figures of its last evaluation.
func TestEvalLeavesTrainingAlone(t *testing.T) {
	dir := t.TempDir()
	x, y := heldOut(t, dir, 101, dataset.SyntheticD, 101)
	save, ckpt, sum := filepath.Join(dir, "save"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "sum.json")
	base := args("--steps", "30", "--optimizer", "adam", "--lr", "0.01")
	plain := ddpTrain(t, base...)
	evaluated := ddpTrain(t, append(base, "--eval-data", x, "--eval-labels", y, "--save", save, "--checkpoint", ckpt,
		"--summary", sum)...)
	every := ddpTrain(t, append(base, "--eval-data", x, "--eval-labels", y, "--eval-every", "10")...)
	localSum := filepath.Join(dir, "local.json")
	local := ddpTrain(t, append(base, "--eval-data", x, "--eval-labels", y, "--backend", "local", "--summary",
		localSum)...)
	for _, r := range []result{plain, evaluated, every, local} {
		if r.code != 0 {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
	}
	want := digests(plain.stderr)
	for _, r := range []result{evaluated, every} {
		if got := digests(r.stderr); len(got) != 2 || got["0"] != want["0"] || got["1"] != want["0"] {
			t.Fatalf("digests %v with --eval-data, %v without", got, want)
		}
	}
	if got := evalSteps(evaluated.stderr); !slices.Equal(got, []int{16, 30}) {
		t.Errorf("eval lines at steps %v, want 16 and 30 (the epoch's end and the run's)", got)
	}
	if got := evalSteps(every.stderr); !slices.Equal(got, []int{10, 20, 30}) {
		t.Errorf("--eval-every 10: eval lines at steps %v, want 10, 20, 30", got)
	}
	final := readEvalSummary(t, sum)
	if final.Samples != 101 || final.Step == nil || *final.Step != 30 {
		t.Fatalf("summary's evaluation: %d samples at step %v, want 101 at 30", final.Samples, final.Step)
	}
	sameEval(t, "--backend local", final, readEvalSummary(t, localSum))
	for _, init := range []string{save, ckpt} {
		out := filepath.Join(dir, "eval-"+filepath.Base(init)+".json")
		r := ddpTrain(t, "eval", "--init", init, "--data", x, "--labels", y, "--hidden", "16", "--batch-size", "16",
			"--summary", out, "--log-format", "json")
		if r.code != 0 {
			t.Fatalf("ddp-train eval --init %s: exit %d\n%s", init, r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "eval_loss ") {
			t.Errorf("ddp-train eval printed %q", r.stdout)
		}
		sameEval(t, "ddp-train eval --init "+filepath.Base(init), final, readEvalSummary(t, out))
	}
}

// Every held-out sample is scored exactly once whatever the world size: 1,
// 2 and 3 ranks, over processes and goroutines, on 101 samples, give one
// process's figures.
func TestEvalSameOnEveryWorldSize(t *testing.T) {
	dir := t.TempDir()
	x, y := heldOut(t, dir, 101, dataset.SyntheticD, 101)
	save := filepath.Join(dir, "save")
	if r := ddpTrain(t, args("--steps", "20", "--save", save)...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var one evalFigures
	for _, run := range []struct{ backend, nproc string }{{"tcp", "1"}, {"tcp", "2"}, {"tcp", "3"}, {"local", "3"}} {
		out := filepath.Join(dir, run.backend+run.nproc+".json")
		r := ddpTrain(t, "eval", "--init", save, "--data", x, "--labels", y, "--hidden", "16", "--batch-size", "16",
			"--backend", run.backend, "--nproc", run.nproc, "--summary", out, "--log-format", "json")
		if r.code != 0 {
			t.Fatalf("--backend %s --nproc %s: exit %d\n%s", run.backend, run.nproc, r.code, r.stderr)
		}
		got := readEvalSummary(t, out)
		if one.Loss == nil {
			one = got
			if got.Samples != 101 {
				t.Fatalf("one process scored %d samples, want 101", got.Samples)
			}
			continue
		}
		sameEval(t, "--backend "+run.backend+" --nproc "+run.nproc, one, got)
	}
}

// Without --data, `ddp-train eval` scores the synthetic set training
// uses: a fresh model of the same seed scores the same on it as the
// training run's evaluation of it before any step.
func TestEvalSyntheticDefault(t *testing.T) {
	dir := t.TempDir()
	save := filepath.Join(dir, "save")
	if r := ddpTrain(t, args("--steps", "5", "--save", save)...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	r := ddpTrain(t, "eval", "--init", save, "--hidden", "16", "--samples", "512", "--log-format", "json")
	if r.code != 0 || !strings.Contains(r.stdout, "samples 512") {
		t.Fatalf("exit %d, stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
}

// Bad held-out input is refused before any training, exit 2, naming it.
func TestEvalBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name        string
		d, labels   int
		cmd         bool // `ddp-train eval`
		wantMessage string
	}{
		{"fewer labels than samples", dataset.SyntheticD, 100, false, "has 100 labels but"},
		{"features the model cannot take", dataset.SyntheticD - 1, 101, false, "the model takes [32]"},
		{"ddp-train eval: fewer labels", dataset.SyntheticD, 100, true, "has 100 labels but"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sub := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			x, y := heldOut(t, sub, 101, c.d, c.labels)
			var r result
			if c.cmd {
				r = ddpTrain(t, "eval", "--init", sub, "--data", x, "--labels", y, "--hidden", "16")
			} else {
				r = ddpTrain(t, args("--steps", "5", "--eval-data", x, "--eval-labels", y)...)
			}
			if r.code != 2 || !strings.Contains(r.stderr, c.wantMessage) {
				t.Fatalf("exit %d, want 2 with %q:\n%s", r.code, c.wantMessage, r.stderr)
			}
		})
	}
}

// The evaluation flags mean what they say: Note [no flag is ignored].
func TestEvalFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--eval-every", "5"}, "--eval-every needs --eval-data"},
		{[]string{"--eval-data", "x.npy"}, "--eval-data and --eval-labels go together"},
		{[]string{"--eval-data", "x", "--eval-labels", "y", "--eval-every", "-1"}, "--eval-every -1"},
		{[]string{"eval", "--data", "x", "--labels", "y"}, "ddp-train eval needs --init DIR"},
		{[]string{"eval", "--init", "d", "--lr", "0.5"}, "ddp-train eval: --lr does nothing here"},
		{[]string{"eval", "--init", "d", "--eval-data", "x", "--eval-labels", "y"},
			"ddp-train eval: --eval-data does nothing here"},
		{[]string{"eval", "--init", "d", "prog"}, "ddp-train eval takes flags only"},
	} {
		_, err := parseCommand(c.args, io.Discard)
		if err == nil || !isUsage(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error with %q", c.args, err, c.want)
		}
	}
	c, err := parseCommand([]string{"eval", "--init", "d", "--nproc", "3"}, io.Discard)
	if err != nil || !c.evalOnly || c.steps != 0 || c.epochs != 0 || c.nproc != 3 {
		t.Errorf("ddp-train eval --init d --nproc 3: %+v, %v", c.evalFlags, err)
	}
}

// The bar shows the last evaluation after the training figures, and still
// fits the terminal; the ddp_eval_* gauges hold it.
func TestEvalOnTheBarAndInTheMetrics(t *testing.T) {
	r := figures{Loss: 0.1234, Accuracy: 0.5, SamplesPerSec: 12345, CommFraction: 0.25, Evaluated: true, EvalLoss: 0.5,
		EvalAccuracy: 0.875}
	if line := barLine(50, 100, r, 200); !strings.Contains(line, "comm 25% eval loss 0.5000 acc 87.5%") {
		t.Errorf("bar %q: no eval figures after the training figures", line)
	}
	for _, cols := range []int{0, 40, 80} {
		if line := barLine(50, 100, r, cols); len(line) > max(cols-1, 0) {
			t.Errorf("%d columns: %q", cols, line)
		}
	}
	m := newTrainingMetrics()
	m.observeEval(evalResult{Step: 7, Loss: 0.25, Accuracy: 0.75, Samples: 101})
	for _, g := range []struct {
		c    prometheus.Collector
		want float64
	}{{m.evalLoss, 0.25}, {m.evalAccuracy, 0.75}, {m.evalStep, 7}} {
		if got := testutil.ToFloat64(g.c); got != g.want {
			t.Errorf("gauge %v, want %v", got, g.want)
		}
	}
	if n := len(m.collectors()); n != 16 {
		t.Errorf("%d collectors, want the 10 training ones, 3 eval gauges and 3 DiLoCo counters", n)
	}
}

// The per-sample loss is the training loss: softmax cross-entropy, stable
// for logits far apart.
func TestCrossEntropySum(t *testing.T) {
	got := crossEntropySum([]float64{0, 0, 1000, 0}, []int{1, 0}, 2)
	if want := math.Log(2) + 0; math.Abs(got-want) > 1e-15 {
		t.Errorf("got %v, want log 2 + 0 = %v", got, want)
	}
}

// When the run evaluates: after the step in which an epoch ends (16
// micro-batches an epoch here), every --eval-every steps, and after the
// last step always.
func TestEvalDue(t *testing.T) {
	e := &evaluator{perEp: 16}
	for _, c := range []struct {
		accum int
		flags []string
		every int
		want  []int
	}{
		{1, nil, 0, []int{16, 32, 40}},
		{3, nil, 0, []int{6, 11, 16, 22, 27, 32, 38, 40}},
		{1, []string{"eval-every"}, 15, []int{15, 30, 40}},
		{1, []string{"eval-every"}, 0, []int{40}},
	} {
		tr := &trainer{c: config{gradAccum: c.accum, setFlags: c.flags, evalFlags: evalFlags{evalEvery: c.every}}}
		var got []int
		for step := 1; step <= 40; step++ {
			if tr.evalDue(e, step, 40) {
				got = append(got, step)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("--grad-accum %d %v %d: evaluates after steps %v, want %v", c.accum, c.flags, c.every, got, c.want)
		}
	}
	if (&trainer{}).evalDue(nil, 40, 40) {
		t.Error("a run without a held-out set evaluates")
	}
}
