package testmodel

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/goddp/ddp"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/nccltest"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// SteppedGrads copies the gradients the documented loop would step,
// solver.Step(d.ValueGrads()), keyed by parameter name.
func SteppedGrads(d *ddp.DDP) (map[string][]float64, error) {
	out := map[string][]float64{}
	for _, vg := range d.ValueGrads() {
		n, ok := vg.(interface{ Name() string }) // a *G.Node or DDP's own
		if !ok {
			return nil, fmt.Errorf("ValueGrads gave a %T", vg)
		}
		g, err := vg.Grad()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Name(), err)
		}
		out[n.Name()] = Float64s(g.Data())
	}
	return out, nil
}

// BranchCase is one run: the head each rank builds, the options and the
// comm hook (by name; "" is the default allreduce).
type BranchCase struct {
	Heads   []string
	Opts    ddp.Options
	Hook    string
	Backend string            // "local" when empty
	Groups  []pg.ProcessGroup // when set, the groups to run on instead
}

func (c BranchCase) String() string {
	var mode []string
	if c.Opts.FindUnusedParameters {
		mode = append(mode, "unused")
	}
	if c.Opts.StaticGraph {
		mode = append(mode, "static")
	}
	if c.Opts.GradientAsBucketView {
		mode = append(mode, "view")
	}
	if c.Opts.BucketCapBytes > 0 {
		mode = append(mode, fmt.Sprintf("cap%d", c.Opts.BucketCapBytes))
	}
	hook := c.Hook
	if hook == "" {
		hook = "allreduce"
	}
	backend := c.Backend
	if backend == "" {
		backend = "local"
	}
	return fmt.Sprintf("%s/%s/%s/%s", backend, strings.Join(c.Heads, "+"), strings.Join(mode, ","), hook)
}

// Check is handed the stepped gradients of every rank after each RunAll
// of BranchRun, with the parameters every rank held before it.
type Check func(step int, values [][][]float64, got []map[string][]float64)

// BranchRun trains c for BranchSteps steps with plain SGD. After each
// RunAll it hands check the stepped gradients of every rank; after each
// step it checks that the parameters are bitwise equal across ranks. It
// returns the replicas.
func BranchRun(t *testing.T, ctx context.Context, c BranchCase, check Check) []*Branch {
	t.Helper()
	replicas := wrapBranches(t, ctx, c)
	n := len(replicas)
	for _, m := range replicas {
		if err := m.Build(t); err != nil {
			t.Fatal(err)
		}
	}
	solvers := make([]G.Solver, n)
	for r := range solvers {
		solvers[r] = G.NewVanillaSolver(G.WithLearnRate(0.5))
	}
	names := BranchNames()
	for step := range BranchSteps {
		values := make([][][]float64, n)
		for r, m := range replicas {
			values[r] = m.Values()
		}
		got := make([]map[string][]float64, n)
		testworld.NoErrors(t, testworld.Parallel(n, func(r int) error {
			m := replicas[r]
			if err := m.Feed(step, r); err != nil {
				return err
			}
			if err := m.DDP.RunAll(ctx, m.VM); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			var err error
			got[r], err = SteppedGrads(m.DDP)
			return err
		}))
		check(step, values, got)
		testworld.NoErrors(t, testworld.Parallel(n, func(r int) error {
			m := replicas[r]
			err := solvers[r].Step(m.DDP.ValueGrads())
			m.VM.Reset()
			return err
		}))
		for r := 1; r < n; r++ {
			if p, k := FirstBitDiff(replicas[0].Values(), replicas[r].Values()); p >= 0 {
				t.Fatalf("after step %d, rank %d's %s[%d] differs from rank 0's: %v vs %v", step, r, names[p], k,
					replicas[r].Values()[p][k], replicas[0].Values()[p][k])
			}
		}
	}
	return replicas
}

// wrapBranches makes c's replicas, rank r's from seed 7+r, and wraps them
// on c's groups with c's options and hook.
func wrapBranches(t *testing.T, ctx context.Context, c BranchCase) []*Branch {
	t.Helper()
	n := len(c.Heads)
	backend := c.Backend
	if backend == "" {
		backend = "local"
	}
	gs := c.Groups
	if gs == nil {
		gs = BranchGroups(t, backend, n)
	}
	replicas := make([]*Branch, n)
	for r := range replicas {
		replicas[r] = NewBranch(t, c.Heads[r], uint64(7+r))
	}
	testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
		o := c.Opts
		if c.Hook != "" {
			h, err := commhook.ByName(c.Hook, PowerSGDForTests())
			if err != nil {
				return err
			}
			o.Hook = h
			if c, ok := h.(interface{ Close() error }); ok {
				t.Cleanup(func() { c.Close() })
			}
		}
		d, err := ddp.Wrap(ctx, g, replicas[r].Params, o)
		if err == nil {
			t.Cleanup(func() { d.Close() }) // device buckets, before the groups close
		}
		replicas[r].DDP = d
		return err
	}))
	return replicas
}

// BranchGroups is testworld.Groups, plus "nccl-fake": pg/nccl over the
// NCCL binding's test double, whose buckets live in (pretend) device memory.
func BranchGroups(t *testing.T, backend string, n int) []pg.ProcessGroup {
	t.Helper()
	if backend != "nccl-fake" {
		return testworld.Groups(t, backend, n)
	}
	fake, err := nccltest.NewWorld(n, nccltest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fake.Close() })
	return fake.ProcessGroups()
}

// PowerSGDForTests compresses from the first iteration, at rank 1.
func PowerSGDForTests() commhook.PowerSGDOptions {
	o := commhook.DefaultPowerSGDOptions()
	o.MatrixApproximationRank, o.StartIter = 1, 2
	return o
}

// ReferenceGrads is the plain reference for one step: each rank's
// gradients by Gorgonia alone at that rank's values, summed in rank order
// and divided by the number of ranks.
func ReferenceGrads(t *testing.T, heads []string, values [][][]float64, step int, plain []*Branch) [][]float64 {
	t.Helper()
	var sum [][]float64
	for r := range heads {
		g, err := plain[r].LocalGrads(values[r], step, r)
		if err != nil {
			t.Fatal(err)
		}
		if sum == nil {
			sum = g
			continue
		}
		for i := range sum {
			for k := range sum[i] {
				sum[i][k] += g[i][k]
			}
		}
	}
	for i := range sum {
		for k := range sum[i] {
			sum[i][k] /= float64(len(heads))
		}
	}
	return sum
}

// PlainModels builds one plain float64 model per head, for the references.
func PlainModels(t *testing.T, heads []string) []*Branch {
	t.Helper()
	return PlainModelsOf(t, heads, tensor.Float64)
}

// PlainModelsOf is PlainModels in dtype dt.
func PlainModelsOf(t *testing.T, heads []string, dt tensor.Dtype) []*Branch {
	t.Helper()
	out := make([]*Branch, len(heads))
	for r, h := range heads {
		out[r] = NewBranchOf(t, h, 0, dt)
		if err := out[r].Build(t); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// CheckStepped fails t unless every rank steps every parameter with want
// (within tol, relative to the parameter's largest element) and the ranks
// step bitwise the same.
func CheckStepped(t *testing.T, step int, want [][]float64, got []map[string][]float64, tol float64) {
	t.Helper()
	for r, gr := range got {
		for i, name := range BranchNames() {
			g, ok := gr[name]
			if !ok {
				t.Fatalf("step %d: rank %d's documented loop, solver.Step(d.ValueGrads()), "+
					"does not step %s (the average gradient is %v)", step, r, name, Short(want[i]))
			}
			if e := RelErr([][]float64{g}, [][]float64{want[i]}); e > tol {
				t.Fatalf("step %d: rank %d steps %s with %v; the average of the ranks' own gradients is %v (relative error %.2g)",
					step, r, name, Short(g), Short(want[i]), e)
			}
			if r > 0 {
				if p, k := FirstBitDiff([][]float64{g}, [][]float64{got[0][name]}); p >= 0 {
					t.Fatalf("step %d: rank %d steps %s[%d] with %v, rank 0 with %v", step, r, name, k, g[k], got[0][name][k])
				}
			}
		}
	}
}
