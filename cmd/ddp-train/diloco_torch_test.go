package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// dilocoCase is one run of TestDiLoCoMatchesTorch: ddp-train
// --diloco-sync-every and the paper's algorithm in plain torch
// (testdata/torch_diloco.py).
type dilocoCase struct {
	Name          string         `json:"name"`
	World         int            `json:"world"`
	Steps         int            `json:"steps"`
	LR            float64        `json:"lr"`
	Optimizer     string         `json:"optimizer"` // torch's class: sgd, adamw
	Kwargs        map[string]any `json:"kwargs"`
	H             int            `json:"h"`
	OuterLR       float64        `json:"outer_lr"`
	OuterMomentum float64        `json:"outer_momentum"`
}

func dilocoCases() []dilocoCase {
	var cs []dilocoCase
	for _, world := range []int{2, 3} {
		for _, h := range []int{5, 10} {
			for _, opt := range []string{"adamw", "sgd"} {
				lr := map[string]float64{"adamw": 0.02, "sgd": 0.1}[opt]
				cs = append(cs, dilocoCase{Name: fmt.Sprintf("%s-h%d-%d", opt, h, world), World: world, Steps: 2*h + 3,
					LR: lr, Optimizer: opt, Kwargs: map[string]any{}, H: h, OuterLR: 0.7, OuterMomentum: 0.9})
			}
		}
	}
	return cs
}

// TestDiLoCoMatchesTorch trains ddp-train --diloco-sync-every H (float64,
// no shuffle, tcp) and DiLoCo written out in torch 1.13 (gloo,
// DistributedSampler(shuffle=False)) from the same weights on the same
// data: 2 and 3 ranks, inner AdamW and SGD, H 5 and 10, outer lr 0.7 and
// Nesterov momentum 0.9. Every final global parameter agrees within
// recipeTol.
func TestDiLoCoMatchesTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python processes")
	}
	cases := dilocoCases()
	tr := startTorch(t, "torch_diloco.py", cases)
	dir, initDir, sizes := tr.dir, tr.initDir, tr.sizes
	common := tr.flags()
	saved := map[string]string{}
	for _, c := range cases {
		out := filepath.Join(dir, c.Name)
		args := slices.Concat(common, []string{"--optimizer", c.Optimizer, "--nproc", strconv.Itoa(c.World), "--lr",
			strconv.FormatFloat(c.LR, 'g', -1, 64), "--steps", strconv.Itoa(c.Steps), "--save", out,
			"--diloco-sync-every", strconv.Itoa(c.H)})
		if r := ddpTrain(t, args...); r.code != 0 {
			t.Fatalf("%s: ddp-train exited %d\n%s", c.Name, r.code, r.stderr)
		}
		saved[c.Name] = out
	}
	torch := tr.results(t)
	for _, c := range cases {
		checkRecipe(t, recipeCase{Name: c.Name, Steps: c.Steps}, torch[c.Name], sizes, initDir, saved[c.Name])
	}
}
