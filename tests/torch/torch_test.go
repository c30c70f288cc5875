package torch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/goddp/ddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/tests/testmodel"
	G "gorgonia.org/gorgonia"
)

// TestBranchHeadsMatchTorchDDP trains the branch model (testmodel.Branch)
// with PyTorch's own DDP (Debian's python3-torch, 1.13; gloo; two
// processes) and with goddp, from the same parameters on the same
// batches, where rank 0's graph is fc2(h)+fc3(h) (Gorgonia shares the
// heads' gradient memory) and rank 1's reaches only fc2, with
// find_unused_parameters and with static_graph. Every parameter of every
// rank must match torch's: a shared or unreached gradient shows as a difference.
// It skips when /usr/bin/python3 has no torch (scripts/test.sh installs it).
func TestBranchHeadsMatchTorchDDP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python processes")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		t.Skip("/usr/bin/python3 has no torch (apt-get install python3-torch; scripts/test.sh does)")
	}
	const lr, steps = 0.5, 5
	heads := []string{testmodel.HeadSum, testmodel.HeadFC2}
	for _, mode := range []string{"unused", "static"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testworld.Ctx(t)
			dir := t.TempDir()
			opts := ddp.Options{FindUnusedParameters: mode == "unused", StaticGraph: mode == "static"}
			ms := make([]*testmodel.Branch, 2)
			for r := range ms {
				ms[r] = testmodel.NewBranch(t, heads[r], 21)
			}
			type batch struct {
				Rows int       `json:"rows"`
				X    []float64 `json:"x"`
				Y    []float64 `json:"y"`
			}
			type param struct {
				Shape []int     `json:"shape"`
				Data  []float64 `json:"data"`
			}
			in := struct {
				Mode    string           `json:"mode"`
				Heads   []string         `json:"heads"`
				LR      float64          `json:"lr"`
				Init    map[string]param `json:"init"`
				Batches [][]batch        `json:"batches"`
			}{Mode: mode, Heads: heads, LR: lr, Init: map[string]param{}, Batches: make([][]batch, 2)}
			for i, p := range ms[0].Params {
				in.Init[testmodel.BranchNames()[i]] = param{Shape: p.Shape().Clone(), Data: ms[0].Values()[i]}
			}
			for r := range 2 {
				for step := range steps {
					x, y := testmodel.BranchBatch(step, r)
					in.Batches[r] = append(in.Batches[r], batch{Rows: testmodel.BranchRows, X: x, Y: y})
				}
			}
			spec, err := json.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			specFile := filepath.Join(dir, "in.json")
			if err := os.WriteFile(specFile, spec, 0o600); err != nil {
				t.Fatal(err)
			}
			torch := make([]map[string][]float64, 2)
			pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			testworld.NoErrors(t, testworld.Parallel(2, func(r int) error {
				out := filepath.Join(dir, fmt.Sprintf("out%d.json", r))
				cmd := exec.CommandContext(pctx, "/usr/bin/python3", "testdata/torch_branch_ddp.py", specFile, fmt.Sprint(r), "2",
					filepath.Join(dir, "store"), out)
				if b, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("torch rank %d: %v\n%s", r, err, b)
				}
				b, err := os.ReadFile(out)
				if err == nil {
					err = json.Unmarshal(b, &torch[r])
				}
				return err
			}))

			gs := testworld.Groups(t, "tcp", 2)
			testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
				var err error
				ms[r].DDP, err = ddp.Wrap(ctx, g, ms[r].Params, opts)
				return err
			}))
			for _, m := range ms {
				if err := m.Build(t); err != nil {
					t.Fatal(err)
				}
			}
			testworld.NoErrors(t, testworld.Parallel(2, func(r int) error {
				m := ms[r]
				s := G.NewVanillaSolver(G.WithLearnRate(lr))
				for step := range steps {
					if err := m.Feed(step, r); err != nil {
						return err
					}
					if err := m.DDP.RunAll(ctx, m.VM); err != nil {
						return err
					}
					if err := s.Step(m.DDP.ValueGrads()); err != nil {
						return err
					}
					m.VM.Reset()
				}
				return nil
			}))
			for r, m := range ms {
				got := m.Values()
				want := make([][]float64, len(testmodel.BranchNames()))
				for i, name := range testmodel.BranchNames() {
					want[i] = torch[r][name]
				}
				t.Logf("rank %d: largest relative difference from torch's DDP %.2g", r, testmodel.RelErr(got, want))
				if e := testmodel.RelErr(got, want); e > 1e-12 {
					t.Errorf("rank %d ends %.2g (relative) from torch's DDP", r, e)
					for i, name := range testmodel.BranchNames() {
						if e := testmodel.RelErr([][]float64{got[i]}, [][]float64{want[i]}); e > 1e-12 {
							t.Errorf("  %s: %v, torch %v (relative error %.2g)", name, testmodel.Short(got[i]), testmodel.Short(want[i]), e)
						}
					}
				}
			}
			if e := testmodel.RelErr(ms[0].Values()[4:5], [][]float64{in.Init["fc3.weight"].Data}); e < 1e-3 {
				t.Fatalf("fc3.weight moved by %.2g only: the comparison would prove little", e)
			}
		})
	}
}
