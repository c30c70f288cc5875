package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// recipeCase is one ddp-train run of TestRecipesMatchTorch and its torch
// twin: flags are ddp-train's, the other fields testdata/torch_recipes.py's.
type recipeCase struct {
	Name      string         `json:"name"`
	Steps     int            `json:"steps"`
	LR        float64        `json:"lr"`
	Optimizer string         `json:"optimizer"`
	Kwargs    map[string]any `json:"kwargs"`
	Schedule  map[string]any `json:"schedule"`
	ClipNorm  float64        `json:"clip_norm,omitempty"`
	ClipValue float64        `json:"clip_value,omitempty"`
	flags     []string
}

// recipeCases cover every optimizer argument, every schedule after a
// warmup and both clippings, each where it bites (the torch side counts
// the steps whose gradients the clipping changed).
var recipeCases = []recipeCase{
	{Name: "sgd-momentum-dampening-wd-cosine-clipnorm", Steps: 24, LR: 0.2, Optimizer: "sgd",
		Kwargs:   map[string]any{"momentum": 0.9, "dampening": 0.2, "weight_decay": 0.05},
		Schedule: map[string]any{"kind": "cosine", "warmup": 5, "min_lr": 0.01}, ClipNorm: 0.3,
		flags: []string{"--momentum", "0.9", "--dampening", "0.2", "--weight-decay", "0.05", "--lr-schedule", "cosine",
			"--warmup-steps", "5", "--min-lr", "0.01", "--clip-grad-norm", "0.3"}},
	{Name: "sgd-nesterov-step-clipvalue", Steps: 24, LR: 0.3, Optimizer: "sgd",
		Kwargs:    map[string]any{"momentum": 0.8, "nesterov": true, "weight_decay": 0.01},
		Schedule:  map[string]any{"kind": "step", "warmup": 3, "start_factor": 0.25, "step_size": 4, "gamma": 0.5},
		ClipValue: 0.02,
		flags: []string{"--momentum", "0.8", "--nesterov", "--weight-decay", "0.01", "--lr-schedule", "step",
			"--warmup-steps", "3", "--warmup-start-factor", "0.25", "--lr-step-size", "4", "--lr-gamma", "0.5",
			"--clip-grad-value", "0.02"}},
	{Name: "adam-betas-eps-wd-linear", Steps: 24, LR: 0.02, Optimizer: "adam",
		Kwargs:   map[string]any{"betas": []float64{0.8, 0.95}, "eps": 1e-6, "weight_decay": 0.02},
		Schedule: map[string]any{"kind": "linear", "warmup": 4, "min_lr": 1e-3},
		flags: []string{"--betas", "0.8,0.95", "--eps", "1e-6", "--weight-decay", "0.02", "--lr-schedule", "linear",
			"--warmup-steps", "4", "--min-lr", "1e-3"}},
	{Name: "adamw-cosine-clipnorm", Steps: 24, LR: 0.02, Optimizer: "adamw", Kwargs: map[string]any{},
		Schedule: map[string]any{"kind": "cosine", "warmup": 8, "min_lr": 1e-3}, ClipNorm: 0.5,
		flags: []string{"--lr-schedule", "cosine", "--warmup-steps", "8", "--min-lr", "1e-3", "--clip-grad-norm", "0.5"}},
	{Name: "momentum", Steps: 12, LR: 0.1, Optimizer: "momentum", Kwargs: map[string]any{}, Schedule: map[string]any{}},
}

// recipeTol bounds the difference of every final parameter from torch's.
const recipeTol = 1e-9

// TestRecipesMatchTorch trains ddp-train (2 ranks, float64, no shuffle)
// with torch's optimizer arguments, schedules and clipping, and torch 1.13
// DDP (gloo, 2 processes, DistributedSampler(shuffle=False)) from the same
// weights on the same data: every final parameter must agree within
// recipeTol. It resumes the AdamW run in the middle of its warmup and of
// its cosine: bitwise equal to the uninterrupted run.
func TestRecipesMatchTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python processes")
	}
	tr := startTorch(t, "torch_recipes.py", recipeCases)
	dir, initDir, sizes := tr.dir, tr.initDir, tr.sizes
	common := append([]string{"--nproc", "2"}, tr.flags()...)
	saved := map[string]string{}
	for _, c := range recipeCases {
		out := filepath.Join(dir, "out-"+c.Name)
		saved[c.Name] = out
		r := ddpTrain(t, slices.Concat(common, []string{"--optimizer", c.Optimizer, "--lr",
			strconv.FormatFloat(c.LR, 'g', -1, 64), "--steps", strconv.Itoa(c.Steps), "--save", out}, c.flags)...)
		if r.code != 0 {
			t.Fatalf("%s: ddp-train exited %d\n%s", c.Name, r.code, r.stderr)
		}
	}
	t.Run("resume", func(t *testing.T) { checkRecipeResume(t, common, recipeCases[3], saved[recipeCases[3].Name]) })
	torch := tr.results(t)
	for _, c := range recipeCases {
		checkRecipe(t, c, torch[c.Name], sizes, initDir, saved[c.Name])
	}
}

// checkRecipe compares ddp-train's parameters saved in dir with torch's
// in res, and checks that they differ from each of torch's runs without
// one of the case's features.
func checkRecipe(t *testing.T, c recipeCase, res map[string]json.RawMessage, sizes []int, initDir, dir string) {
	t.Helper()
	var want map[string][]float64
	var clipped int
	if err := json.Unmarshal(res["params"], &want); err != nil {
		t.Fatalf("%s: torch's parameters: %v", c.Name, err)
	}
	if err := json.Unmarshal(res["clipped"], &clipped); err != nil {
		t.Fatal(err)
	}
	read := func(d, name string, n int) []float64 {
		shape := []int{n}
		if strings.HasSuffix(name, ".weight") {
			k := int(name[2] - '0')
			shape = []int{sizes[k-1], sizes[k]}
		}
		return readNPY(t, filepath.Join(d, name+".npy"), shape...)
	}
	diff := func(other map[string][]float64, d string) float64 {
		var worst float64
		for name, w := range other {
			got := read(d, name, len(w))
			for i := range w {
				worst = max(worst, math.Abs(got[i]-w[i]))
			}
		}
		return worst
	}
	if (c.ClipNorm > 0 || c.ClipValue > 0) && clipped == 0 {
		t.Errorf("%s: the clipping changed no step's gradients: the comparison proves nothing about it", c.Name)
	}
	worst, moved := diff(want, dir), diff(want, initDir)
	t.Logf("%s: max |ddp-train − torch| %.3g over every parameter (training moved them by up to %.3g; clipping bit in "+
		"%d of %d steps)", c.Name, worst, moved, clipped, c.Steps)
	if len(want) == 0 || worst > recipeTol || moved < 1e-2 {
		t.Errorf("%s: ddp-train's parameters differ from torch's by %.3g (want ≤ %g), training moved them by %.3g",
			c.Name, worst, recipeTol, moved)
	}
	for key, raw := range res {
		what, ok := strings.CutPrefix(key, "without ")
		if !ok {
			continue
		}
		var other map[string][]float64
		if err := json.Unmarshal(raw, &other); err != nil {
			t.Fatal(err)
		}
		if d := diff(other, dir); d < 1e3*recipeTol {
			t.Errorf("%s: torch without the %s agrees with ddp-train within %.3g: the test cannot tell", c.Name, what, d)
		} else {
			t.Logf("  torch without the %s differs by %.3g", what, d)
		}
	}
}

// checkRecipeResume runs c again with a checkpoint every 4 steps, and
// resumes it from step 4 (in its warmup) and from step 16 (in its cosine)
// by removing the later checkpoints: each resumed run must save the bytes
// the uninterrupted run saved at want.
func checkRecipeResume(t *testing.T, common []string, c recipeCase, want string) {
	dir := t.TempDir()
	run := slices.Concat(common, []string{"--optimizer", c.Optimizer, "--lr", strconv.FormatFloat(c.LR, 'g', -1, 64),
		"--steps", strconv.Itoa(c.Steps), "--checkpoint-keep", "9"}, c.flags)
	ck := filepath.Join(dir, "ck")
	if r := ddpTrain(t, slices.Concat(run, []string{"--checkpoint", ck, "--checkpoint-every", "4"})...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, from := range []int{4, 16} {
		cut := filepath.Join(dir, fmt.Sprintf("ck%d", from))
		if err := os.CopyFS(cut, os.DirFS(ck)); err != nil {
			t.Fatal(err)
		}
		for s := from + 4; s <= c.Steps; s += 4 {
			if err := os.RemoveAll(filepath.Join(cut, fmt.Sprintf("step-%09d", s))); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(dir, fmt.Sprintf("out%d", from))
		r := ddpTrain(t, slices.Concat(run, []string{"--checkpoint", cut, "--resume", "--save", out})...)
		if r.code != 0 || !strings.Contains(r.stderr, fmt.Sprintf(`"msg":"resuming","rank":0,"step":%d`, from)) {
			t.Fatalf("resume from step %d: exit %d\n%s", from, r.code, r.stderr)
		}
		for _, name := range []string{"fc1.weight.npy", "fc2.bias.npy", "fc3.weight.npy"} {
			x, _ := os.ReadFile(filepath.Join(want, name))
			y, _ := os.ReadFile(filepath.Join(out, name))
			if len(x) == 0 || !bytes.Equal(x, y) {
				t.Errorf("%s: the run resumed from step %d differs from the uninterrupted one", name, from)
			}
		}
	}
	// A resume that would not continue the schedule as it was is refused.
	for _, c := range []struct{ change, want []string }{
		{[]string{"--steps", "30"}, []string{"runs over 24 steps, this run's over 30"}},
		{[]string{"--lr-schedule", "linear"}, []string{"the schedule state is", "resume with the same schedule"}},
		{[]string{"--lr", "0.03", "--resume-allow-changes", "lr"}, []string{"the checkpoint's schedule was made for --lr"}},
	} {
		r := ddpTrain(t, slices.Concat(run, c.change, []string{"--checkpoint", filepath.Join(dir, "ck16"), "--resume"})...)
		for _, w := range c.want {
			if r.code != 2 || !strings.Contains(r.stderr, w) {
				t.Errorf("resume with %v: exit %d; want 2 saying %q\n%s", c.change, r.code, w, r.stderr)
			}
		}
	}
}

// torchRun is a torch reference script running beside ddp-train's runs, on
// the contract data and initial weights it wrote (contractData,
// contractInit) in dir.
type torchRun struct {
	dir, initDir string
	sizes        []int
	out          string
	output       *bytes.Buffer
	done         chan error
}

// startTorch writes the contract data, the initial weights and a spec of
// cases, and starts testdata/script on them: SPEC.json OUT.json, the
// convention of every torch reference here.
func startTorch(t *testing.T, script string, cases any) *torchRun {
	t.Helper()
	py := torchrunPython(t)
	tr := &torchRun{dir: t.TempDir(), output: &bytes.Buffer{}, done: make(chan error, 1)}
	contractData(t, tr.dir, contractN, contractD, contractClasses)
	tr.sizes = append(append([]int{contractD}, contractHidden...), contractClasses)
	tr.initDir = filepath.Join(tr.dir, "init")
	contractInit(tr.sizes).saveOurs(t, tr.initDir)
	spec, err := json.Marshal(map[string]any{"init": tr.initDir, "x": filepath.Join(tr.dir, "X.npy"),
		"y": filepath.Join(tr.dir, "y.npy"), "batch": contractBatch, "hidden": contractHidden, "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	specFile := filepath.Join(tr.dir, "spec.json")
	tr.out = filepath.Join(tr.dir, "torch.json")
	if err := os.WriteFile(specFile, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join("testdata", script), specFile, tr.out)
	cmd.Stdout, cmd.Stderr = tr.output, tr.output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { tr.done <- cmd.Wait() }()
	return tr
}

// flags are ddp-train's flags for the same job as the script's: the
// contract data and weights, the MLP in float64, no shuffle, over tcp.
func (tr *torchRun) flags() []string {
	return []string{"--backend", "tcp", "--data", filepath.Join(tr.dir, "X.npy"), "--labels",
		filepath.Join(tr.dir, "y.npy"), "--init", tr.initDir, "--model", "mlp", "--hidden", "10,7", "--dtype",
		"float64", "--shuffle=false", "--batch-size", strconv.Itoa(contractBatch), "--log-format", "json",
		"--timeout", "30s"}
}

// results waits for the script and reads its results, by case name.
func (tr *torchRun) results(t *testing.T) map[string]map[string]json.RawMessage {
	t.Helper()
	if err := <-tr.done; err != nil {
		t.Fatalf("torch: %v\n%s", err, tr.output.String())
	}
	raw, err := os.ReadFile(tr.out)
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatal(err)
	}
	return res
}
