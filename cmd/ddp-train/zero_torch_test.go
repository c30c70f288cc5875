package main

import (
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// zeroCase is one run of TestZeroMatchesTorch: ddp-train --zero, ddp-train
// without it, and torch's ZeroRedundancyOptimizer (testdata/torch_zero.py).
type zeroCase struct {
	Name      string         `json:"name"`
	World     int            `json:"world"`
	Steps     int            `json:"steps"`
	LR        float64        `json:"lr"`
	Optimizer string         `json:"optimizer"` // torch's class: sgd, adam, adamw
	Kwargs    map[string]any `json:"kwargs"`
	flags     []string
}

func zeroCases() []zeroCase {
	var cs []zeroCase
	for _, world := range []int{2, 3} {
		w := strconv.Itoa(world)
		cs = append(cs,
			zeroCase{Name: "adam-" + w, World: world, Steps: 14, LR: 0.02, Optimizer: "adam", Kwargs: map[string]any{},
				flags: []string{"--optimizer", "adam"}},
			zeroCase{Name: "adamw-" + w, World: world, Steps: 14, LR: 0.02, Optimizer: "adamw",
				Kwargs: map[string]any{}, flags: []string{"--optimizer", "adamw"}},
			zeroCase{Name: "sgd-momentum-" + w, World: world, Steps: 14, LR: 0.1, Optimizer: "sgd",
				Kwargs: map[string]any{"momentum": 0.9}, flags: []string{"--optimizer", "sgd", "--momentum", "0.9"}})
	}
	return cs
}

// TestZeroMatchesTorch trains ddp-train --zero (float64, no shuffle, tcp)
// and torch 1.13 DDP with ZeroRedundancyOptimizer (gloo,
// DistributedSampler(shuffle=False)) from the same weights on the same
// data, at 2 and 3 ranks with Adam, AdamW and SGD with momentum: every
// final parameter agrees within recipeTol, and is bitwise the one
// ddp-train gives without --zero.
func TestZeroMatchesTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python processes")
	}
	cases := zeroCases()
	tr := startTorch(t, "torch_zero.py", cases)
	dir, initDir, sizes := tr.dir, tr.initDir, tr.sizes
	common := tr.flags()
	saved := map[string]string{}
	for _, c := range cases {
		for _, zero := range []bool{true, false} {
			out := filepath.Join(dir, c.Name+map[bool]string{true: "-zero", false: "-plain"}[zero])
			args := slices.Concat(common, c.flags, []string{"--nproc", strconv.Itoa(c.World), "--lr",
				strconv.FormatFloat(c.LR, 'g', -1, 64), "--steps", strconv.Itoa(c.Steps), "--save", out})
			if zero {
				args = append(args, "--zero")
				saved[c.Name] = out
			}
			if r := ddpTrain(t, args...); r.code != 0 {
				t.Fatalf("%s: ddp-train exited %d\n%s", c.Name, r.code, r.stderr)
			}
		}
		sameArrays(t, c.Name, savedArrays(t, saved[c.Name]), savedArrays(t, filepath.Join(dir, c.Name+"-plain")))
	}
	torch := tr.results(t)
	for _, c := range cases {
		checkRecipe(t, recipeCase{Name: c.Name, Steps: c.Steps}, torch[c.Name], sizes, initDir, saved[c.Name])
	}
}
