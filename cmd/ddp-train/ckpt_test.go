package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goddp/ddp/launch"
)

// flipMiddle overwrites four bytes in the middle of the file at path, as
// the report did to params/fc1.weight.npy, and returns a function
// that puts the file back.
func flipMiddle(t *testing.T, path string) (restore func()) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(orig)
	for i := range 4 {
		b[len(b)/2+i-2] ^= 0x5a
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A real checkpoint, each of its files damaged in turn: --resume exits 2
// and its last line names the file; restored, it resumes.
func TestResumeRefusesADamagedCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("one two-worker run per checkpoint file")
	}
	ck := filepath.Join(t.TempDir(), "ck")
	common := args("--optimizer", "momentum", "--lr", "0.05", "--checkpoint", ck)
	if r := ddpTrain(t, slices.Concat(common, []string{"--steps", "4", "--checkpoint-every", "4"})...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var files []string
	filepath.WalkDir(ck, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && d.Name() != ".ddp-train.lock" {
			files = append(files, path)
		}
		return err
	})
	if len(files) != 11 { // latest, manifest, the model card, 4 parameters, 4 momentum buffers
		t.Fatalf("the checkpoint holds %v", files)
	}
	resume := slices.Concat(common, []string{"--steps", "6", "--resume"})
	for _, f := range files {
		restore := flipMiddle(t, f)
		r := ddpTrain(t, resume...)
		restore()
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if last := lines[len(lines)-1]; r.code != 2 || !strings.Contains(last, f) || !strings.Contains(last, "damaged") {
			t.Errorf("%s damaged: exit %d, last line %q; want exit 2 naming the file", f, r.code, last)
		}
	}
	if r := ddpTrain(t, resume...); r.code != 0 {
		t.Fatalf("the restored checkpoint: exit %d\n%s", r.code, r.stderr)
	}
}

// --checkpoint-keep 2: a damaged newest checkpoint is passed with a
// warning, and the run resumed from the older one ends bitwise equal to
// an uninterrupted one; with --checkpoint-keep 1 the same is exit 2.
func TestResumeFallsBackToTheNewestIntactCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ck, whole, resumed := filepath.Join(dir, "ck"), filepath.Join(dir, "whole"), filepath.Join(dir, "resumed")
	common := args("--optimizer", "adam", "--lr", "0.01")
	if r := ddpTrain(t, slices.Concat(common, []string{"--steps", "9", "--save", whole})...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	keep := slices.Concat(common, []string{"--checkpoint", ck, "--checkpoint-keep", "2"})
	if r := ddpTrain(t, slices.Concat(keep, []string{"--steps", "6", "--checkpoint-every", "2"})...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	entries, _ := os.ReadDir(ck)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != ".ddp-train.lock latest step-000000004 step-000000006" {
		t.Fatalf("--checkpoint-keep 2 left %v", names)
	}
	bad := filepath.Join(ck, "step-000000006", "params", "fc1.weight.npy")
	flipMiddle(t, bad)

	// --checkpoint-keep 1
	r := ddpTrain(t, slices.Concat(common, []string{"--checkpoint", ck, "--steps", "9", "--resume"})...)
	if r.code != 2 || !strings.Contains(r.stderr, bad) {
		t.Errorf("--checkpoint-keep 1: exit %d; want 2 naming %s\n%s", r.code, bad, r.stderr)
	}
	r = ddpTrain(t, slices.Concat(keep, []string{"--steps", "9", "--resume", "--save", resumed})...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "falling back") || !strings.Contains(r.stderr, bad) {
		t.Errorf("no warning naming %s in\n%s", bad, r.stderr)
	}
	if !strings.Contains(r.stderr, `"checkpoint":"`+filepath.Join(ck, "step-000000004")) {
		t.Errorf("the run does not say it resumed from step 4:\n%s", r.stderr)
	}
	for _, name := range []string{"fc1.weight.npy", "fc2.bias.npy"} {
		x, _ := os.ReadFile(filepath.Join(whole, name))
		y, _ := os.ReadFile(filepath.Join(resumed, name))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s: the run resumed from step 4 differs from the uninterrupted one", name)
		}
	}
}

// Ranks that fall back to different checkpoints (here each is shown its
// own copy of the directory, and rank 1's newest is damaged) refuse to
// train on, instead of running different steps.
func TestRanksMustLoadTheSameCheckpoint(t *testing.T) {
	dir := t.TempDir()
	ck0, ck1 := filepath.Join(dir, "ck0"), filepath.Join(dir, "ck1")
	common := args("--checkpoint-keep", "2")
	if r := ddpTrain(t,
		slices.Concat(common, []string{"--checkpoint", ck0, "--steps", "4", "--checkpoint-every", "2"})...); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if err := os.CopyFS(ck1, os.DirFS(ck0)); err != nil {
		t.Fatal(err)
	}
	flipMiddle(t, filepath.Join(ck1, "step-000000004", "params", "fc2.bias.npy"))

	port, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := launch.NewSecret()
	self, _ := os.Executable()
	results := make([]result, 2)
	var wg sync.WaitGroup
	for r, ck := range []string{ck0, ck1} {
		cmd := exec.Command(self, slices.Concat(common, []string{"--checkpoint", ck, "--resume", "--steps", "6"})...)
		cmd.Env = append(os.Environ(), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "GODDP_SECRET="+secret,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE=2")
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		wg.Go(func() {
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			results[r] = result{code: code, stderr: errOut.String()}
		})
	}
	wg.Wait()
	for r, res := range results {
		if res.code != 2 || !strings.Contains(res.stderr, "checkpoints of different steps, 2 to 4") {
			t.Errorf("rank %d: exit %d; want 2 and the disagreement named\n%s", r, res.code, res.stderr)
		}
	}
}
