package replicas_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goddp/ddp"
	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/reducer"
	"github.com/goddp/ddp/tests/testmodel"
	G "gorgonia.org/gorgonia"
)

// The tests of this file hunt the ways replicas drift apart silently
// (issue 20): two parameters whose gradients Gorgonia computes by the same
// expression, which it hash-conses into one node and so one memory, and
// parameters that a rank's graph does not reach. Each rank may build a
// different graph (a "head"), and after every RunAll the gradients that
// the documented loop steps (d.ValueGrads()) are compared with a plain
// reference: each rank's gradients computed by Gorgonia alone, averaged
// over ranks, with zeros where a rank's graph does not reach a parameter.
// They must also be bitwise equal across ranks, and so must the
// parameters after every step.

// TestReplicasMatchPlainReference: every rank steps every parameter with
// the average of the ranks' own gradients, whichever graph each rank
// builds, in every mode that changes where gradients live or when they
// are reduced. It fails on the two defects of issue 20: with "sum" the
// gradients of fc2 and fc3 were one memory (fc3's average written over
// fc2's), and a rank whose graph does not reach a parameter did not step
// it.
func TestReplicasMatchPlainReference(t *testing.T) {
	unused := ddp.Options{FindUnusedParameters: true}
	layouts := [][]string{
		{headSum, headFC2},
		{headFC3, headSum},
		{headSum, headFC2, headFC3},
		{headShared, headFC2},
		{headTrunk, headFC3},
		{headConcat, headFC2},
		{headSum, headSum},
	}
	var cases []branchCase
	for _, heads := range layouts {
		cases = append(cases,
			branchCase{Heads: heads, Opts: unused},
			branchCase{Heads: heads, Opts: ddp.Options{FindUnusedParameters: true, GradientAsBucketView: true}},
			branchCase{Heads: heads, Opts: ddp.Options{StaticGraph: true}},
			branchCase{Heads: heads,
				Opts: ddp.Options{FindUnusedParameters: true, BucketCapBytes: 8, FirstBucketBytes: 8}},
		)
	}
	cases = append(cases,
		branchCase{Heads: []string{headSum, headSum}, Opts: ddp.Options{}},
		branchCase{Heads: []string{headSum, headSum}, Opts: ddp.Options{GradientAsBucketView: true}},
		branchCase{Heads: []string{headSum, headFC2}, Opts: ddp.Options{StaticGraph: true, GradientAsBucketView: true}},
		branchCase{Heads: []string{headSum, headFC2}, Opts: unused, Backend: "tcp"},
		branchCase{Heads: []string{headSum, headFC2}, Opts: ddp.Options{FindUnusedParameters: true, CheckReplicasEvery: 1},
			Backend: "nccl-fake"},
		branchCase{Heads: []string{headSum, headFC2}, Opts: ddp.Options{StaticGraph: true}, Backend: "nccl-fake"},
	)
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			ctx := testworld.Ctx(t)
			plain := testmodel.PlainModels(t, c.Heads)
			testmodel.BranchRun(t, ctx, c, func(step int, values [][][]float64, got []map[string][]float64) {
				testmodel.CheckStepped(t, step, testmodel.ReferenceGrads(t, c.Heads, values, step, plain), got, 1e-12)
			})
		})
	}
}

// TestReplicasMatchTwinWithEveryHook: with each built-in hook, a run whose
// graph hash-conses the gradients of fc2 and fc3 ("sum") steps exactly as
// the same run on a graph that computes the same values without sharing a
// node ("sum×1"), bitwise, and the ranks agree bitwise. The hooks'
// results are not the plain average (fp16, PowerSGD), so the twin is the
// reference; with allreduce it is also checked against the average.
func TestReplicasMatchTwinWithEveryHook(t *testing.T) {
	for _, hook := range commhook.Names() {
		if hook == "noop" {
			continue // no communication: replicas diverge by design
		}
		for _, opts := range []ddp.Options{
			{FindUnusedParameters: true}, {StaticGraph: true}, {FindUnusedParameters: true, GradientAsBucketView: true},
		} {
			c := branchCase{Heads: []string{headSum, headFC2}, Opts: opts, Hook: hook}
			t.Run(c.String(), func(t *testing.T) {
				ctx := testworld.Ctx(t)
				var twin [][]map[string][]float64
				tc := c
				tc.Heads = []string{headSumX1, headFC2}
				testmodel.BranchRun(t, ctx, tc, func(step int, _ [][][]float64, got []map[string][]float64) {
					twin = append(twin, got)
				})
				testmodel.BranchRun(t, ctx, c, func(step int, _ [][][]float64, got []map[string][]float64) {
					for r := range got {
						for _, name := range testmodel.BranchNames() {
							g, ok := got[r][name]
							if !ok {
								t.Fatalf("step %d: rank %d does not step %s", step, r, name)
							}
							if p, k := testmodel.FirstBitDiff([][]float64{g}, [][]float64{twin[step][r][name]}); p >= 0 {
								t.Fatalf("step %d: rank %d steps %s[%d] with %v; the twin graph without shared nodes steps it with %v",
									step, r, name, k, g[k], twin[step][r][name][k])
							}
						}
					}
				})
			})
		}
	}
}

// TestReplicaCheckStopsDrift: with CheckReplicasEvery, a loop that steps
// only the parameters its own graph reaches (what the documented loop did
// before issue 20) is caught on every rank at the next check, naming the
// first parameter that drifted (fc3.weight, which rank 1's graph does not
// reach) and the ranks.
func TestReplicaCheckStopsDrift(t *testing.T) {
	ctx := testworld.Ctx(t)
	heads := []string{headSum, headFC2}
	gs := testworld.Groups(t, "local", 2)
	ms := make([]*testmodel.Branch, 2)
	for r := range ms {
		ms[r] = testmodel.NewBranch(t, heads[r], 3)
	}
	testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
		var err error
		ms[r].DDP, err = ddp.Wrap(ctx, g, ms[r].Params, ddp.Options{FindUnusedParameters: true, CheckReplicasEvery: 2})
		return err
	}))
	for _, m := range ms {
		if err := m.Build(t); err != nil {
			t.Fatal(err)
		}
	}
	errs := testworld.Parallel(2, func(r int) error {
		m := ms[r]
		s := G.NewVanillaSolver(G.WithLearnRate(0.5))
		for step := range 4 {
			if err := m.Feed(step, r); err != nil {
				return err
			}
			if err := m.DDP.RunAll(ctx, m.VM); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			var local G.Nodes // the old loop: only what this rank's graph reaches
			for i, g := range m.Grads {
				if g != nil {
					local = append(local, m.Params[i])
				}
			}
			if err := s.Step(G.NodesToValueGrads(local)); err != nil {
				return err
			}
			m.VM.Reset()
		}
		return nil
	})
	for r, err := range errs {
		if !errors.Is(err, reducer.ErrReplicasDiverged) || !strings.Contains(err.Error(), "step 2:") ||
			!strings.Contains(err.Error(), "parameter 4 (fc3.weight)") || !strings.Contains(err.Error(), "ranks 1 hold") {
			t.Errorf("rank %d: %v; want ErrReplicasDiverged at step 2 naming fc3.weight and rank 1", r, err)
		}
	}
}

// TestJoinWithBranchHeads: uneven inputs (2 and 4 batches) under a Join,
// where rank 1's graph does not reach fc3, with the replica check on at
// every iteration (it stands aside while a rank has joined). The
// parameters follow torch's rule computed directly: at each iteration the
// active ranks' own gradients, zeros where a graph does not reach a
// parameter, summed and divided by the world size, one SGD step; both
// ranks end with the last joiner's parameters.
func TestJoinWithBranchHeads(t *testing.T) {
	ctx := testworld.Ctx(t)
	heads, batches := []string{headSum, headFC2}, []int{4, 2}
	const lr = 0.5
	gs := testworld.Groups(t, "tcp", 2)
	ms := make([]*testmodel.Branch, 2)
	for r := range ms {
		ms[r] = testmodel.NewBranch(t, heads[r], 11)
	}
	testworld.NoErrors(t, testworld.OnGroups(gs, func(r int, g pg.ProcessGroup) error {
		var err error
		ms[r].DDP, err = ddp.Wrap(ctx, g, ms[r].Params, ddp.Options{FindUnusedParameters: true, CheckReplicasEvery: 1})
		return err
	}))
	for _, m := range ms {
		if err := m.Build(t); err != nil {
			t.Fatal(err)
		}
	}
	start := ms[0].Values()
	testworld.NoErrors(t, testworld.Parallel(2, func(r int) error {
		m := ms[r]
		j, err := m.DDP.NewJoin(reducer.JoinOptions{})
		if err != nil {
			return err
		}
		s := G.NewVanillaSolver(G.WithLearnRate(lr))
		for step := range batches[r] {
			if err := j.Step(ctx, true); err != nil {
				return err
			}
			if err := m.Feed(step, r); err != nil {
				return err
			}
			if err := m.DDP.RunAll(ctx, m.VM); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			if err := s.Step(m.DDP.ValueGrads()); err != nil {
				return err
			}
			m.VM.Reset()
		}
		return j.Finish(ctx)
	}))
	plain := testmodel.PlainModels(t, heads)
	w := start
	for step := range 4 {
		sum := make([][]float64, len(w))
		for i := range w {
			sum[i] = make([]float64, len(w[i]))
		}
		for r, b := range batches {
			if b <= step {
				continue
			}
			g, err := plain[r].LocalGrads(w, step, r)
			if err != nil {
				t.Fatal(err)
			}
			for i := range g {
				for k := range g[i] {
					sum[i][k] += g[i][k]
				}
			}
		}
		for i := range w {
			for k := range w[i] {
				w[i][k] -= lr * (sum[i][k] / 2)
			}
		}
	}
	for r, m := range ms {
		got := m.Values()
		if e := testmodel.RelErr(got, w); e > 1e-12 {
			p, k := testmodel.FirstBitDiff(got, w)
			t.Errorf("rank %d: relative error %.2g from torch's Join rule; first at %s[%d]: %v, want %v",
				r, e, testmodel.BranchNames()[p], k, got[p][k], w[p][k])
		}
		if p, _ := testmodel.FirstBitDiff(got, ms[0].Values()); p >= 0 {
			t.Errorf("rank %d's %s differs from rank 0's", r, testmodel.BranchNames()[p])
		}
	}
}

// TestReplicasAccumulateWithBranchHeads: gradient accumulation (a no_sync
// micro-batch, then a synchronised one) where rank 0's gradients of fc2
// and fc3 share memory and rank 1's graph does not reach fc3. The stepped
// gradient is the average over ranks of each rank's sum over its two
// micro-batches, as torch's no_sync gives.
func TestReplicasAccumulateWithBranchHeads(t *testing.T) {
	heads := []string{headSum, headFC2}
	for _, opts := range []ddp.Options{
		{FindUnusedParameters: true}, {FindUnusedParameters: true, GradientAsBucketView: true},
	} {
		t.Run(fmt.Sprintf("view=%v", opts.GradientAsBucketView), func(t *testing.T) {
			ctx := testworld.Ctx(t)
			gs := testworld.Groups(t, "local", 2)
			ms := make([]*testmodel.Branch, 2)
			for r := range ms {
				ms[r] = testmodel.NewBranch(t, heads[r], 5)
			}
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
			plain := testmodel.PlainModels(t, heads)
			for step := range 3 {
				values := [][][]float64{ms[0].Values(), ms[1].Values()}
				want := make([][]float64, len(testmodel.BranchNames()))
				for r := range 2 {
					for micro := range 2 {
						g, err := plain[r].LocalGrads(values[r], 2*step+micro, r)
						if err != nil {
							t.Fatal(err)
						}
						for i := range g {
							if want[i] == nil {
								want[i] = make([]float64, len(g[i]))
							}
							for k := range g[i] {
								want[i][k] += g[i][k] / 2
							}
						}
					}
				}
				got := make([]map[string][]float64, 2)
				testworld.NoErrors(t, testworld.Parallel(2, func(r int) error {
					m := ms[r]
					for micro := range 2 {
						if err := m.Feed(2*step+micro, r); err != nil {
							return err
						}
						run := m.DDP.RunAllNoSync
						if micro == 1 {
							run = m.DDP.RunAll
						}
						if err := run(ctx, m.VM); err != nil {
							return err
						}
						if micro == 0 {
							m.VM.Reset()
						}
					}
					var err error
					got[r], err = testmodel.SteppedGrads(m.DDP)
					if err == nil {
						err = G.NewVanillaSolver(G.WithLearnRate(0.5)).Step(m.DDP.ValueGrads())
					}
					m.VM.Reset()
					return err
				}))
				testmodel.CheckStepped(t, step, want, got, 1e-12)
			}
		})
	}
}
