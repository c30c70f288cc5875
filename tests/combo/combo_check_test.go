package combo_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/goddp/ddp/reducer"
	"github.com/goddp/ddp/tests/testmodel"
	"gorgonia.org/tensor"
)

// checkCombo checks a combination's run, step by step: how it ended;
// before every step, that the replicas DDP keeps equal are bitwise equal
// (and start from rank 0's model); after every RunAll, that each rank
// steps the reference's gradients, and bitwise the same as the ranks
// that must agree with it; that the optimizer stepped those gradients;
// and post-local SGD's averaging.
func checkCombo(t *testing.T, c *combo, initial [][]float64, logs []*rankLog) {
	t.Helper()
	end := c.checkEnd(t, logs)
	plain := testmodel.PlainModelsOf(t, c.heads, c.dt)
	ref := newComboRef(c, plain)
	for step := 0; ; step++ {
		c.checkValues(t, step, initial, logs)
		if step == end {
			return
		}
		contrib := make([]bool, len(c.heads))
		for r, b := range c.batches {
			contrib[r] = b > step
		}
		g := contributions(t, c, step, initial, logs, plain, contrib)
		plan := c.plan(t, step, logs, contrib)
		want := ref.expect(step, g, contrib, plan)
		poisoned := c.poison != nil && c.poison.step == step
		first := map[int]int{} // group -> its first rank
		for r, l := range logs {
			if !contrib[r] {
				continue
			}
			runErr := l.runErr[step]
			var nf *reducer.NonFiniteError
			var origin *reducer.NonFiniteOriginError
			switch {
			case poisoned && c.opts.FindNonFiniteOrigin &&
				(!errors.As(runErr, &origin) || origin.Iteration != step+1 || !slices.Equal(origin.Ranks, []int{c.poison.rank})):
				t.Fatalf("step %d: rank %d's RunAll gave %v; want a NonFiniteOriginError for iteration %d naming rank %d (a NaN "+
					"in its input)", step, r, runErr, step+1, c.poison.rank)
			case poisoned && !c.opts.FindNonFiniteOrigin && (!errors.As(runErr, &nf) || nf.Iteration != step+1):
				t.Fatalf("step %d: rank %d's RunAll gave %v; want a NonFiniteError for iteration %d (a NaN in rank %d's input)",
					step, r, runErr, step+1, c.poison.rank)
			case !poisoned && runErr != nil:
				t.Fatalf("step %d: rank %d's RunAll: %v", step, r, runErr)
			}
			checkSolverStep(t, c, step, r, l, poisoned)
			if poisoned {
				continue // NaN everywhere the poisoned rank's graph reaches
			}
			for i, name := range branchNames {
				got := l.stepped[step][name]
				if e := errorOf(got, want.want[r][i], want.scale[r][i], want.abs); e > want.tol {
					t.Fatalf("step %d: rank %d steps %s with %v; the reference is %v (error %.3g of %.3g, above %.3g)",
						step, r, name, testmodel.Short(got), testmodel.Short(want.want[r][i]), e, want.scale[r][i], want.tol)
				}
			}
			if f, ok := first[want.group[r]]; !ok {
				first[want.group[r]] = r
			} else if p, k := testmodel.FirstBitDiff(mapToSlice(l.stepped[step]), mapToSlice(logs[f].stepped[step])); p >= 0 {
				t.Fatalf("step %d: rank %d steps %s[%d] with %v, rank %d with %v; they must agree bitwise",
					step, r, branchNames[p], k, l.stepped[step][branchNames[p]][k], f, logs[f].stepped[step][branchNames[p]][k])
			}
		}
		c.checkAveraging(t, step, logs)
	}
}

// checkEnd checks how every rank's run ended, and returns the number of
// steps to check.
func (c *combo) checkEnd(t *testing.T, logs []*rankLog) int {
	t.Helper()
	end, want := c.steps, error(nil)
	if c.throwAt >= 0 {
		end, want = c.throwAt, reducer.ErrEarlyTermination
	} else if s := c.divergesAt(); s >= 0 {
		end, want = s, reducer.ErrReplicasDiverged
	}
	for r, l := range logs {
		switch {
		case want == nil && l.err != nil:
			t.Errorf("rank %d, step %d: %v", r, l.errStep, l.err)
		case want != nil && l.err == nil:
			t.Errorf("rank %d ran to the end; want %v at step %d", r, want, end)
		case want != nil && (!errors.Is(l.err, want) || l.errStep != end && want == reducer.ErrReplicasDiverged):
			t.Errorf("rank %d ended at step %d with %v; want %v at step %d", r, l.errStep, l.err, want, end)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return end
}

// checkValues checks the parameters before step (after the last step:
// at the end) on every rank that has them: rank 0's model at the start,
// and bitwise equal within each of c.valueGroup's groups.
func (c *combo) checkValues(t *testing.T, step int, initial [][]float64, logs []*rankLog) {
	t.Helper()
	first := map[int]int{}
	for r, l := range logs {
		v := c.valuesAt(l, step)
		if v == nil {
			continue
		}
		if step == 0 {
			if p, k := testmodel.FirstBitDiff(v, initial); p >= 0 {
				t.Fatalf("rank %d starts with %s[%d] = %v; Wrap should have given it rank 0's %v", r, branchNames[p], k, v[p][k],
					initial[p][k])
			}
		}
		grp := c.valueGroup(step, r)
		f, ok := first[grp]
		if !ok {
			first[grp] = r
			continue
		}
		if p, k := testmodel.FirstBitDiff(v, c.valuesAt(logs[f], step)); p >= 0 {
			t.Fatalf("before step %d: rank %d holds %s[%d] = %v, rank %d %v; DDP keeps them bitwise equal", step, r,
				branchNames[p], k, v[p][k], f, c.valuesAt(logs[f], step)[p][k])
		}
	}
	if c.join != nil && step == c.steps && c.steps > 0 && c.throwAt < 0 {
		last := len(c.batches) - 1
		for c.batches[last] != c.steps {
			last--
		}
		l := logs[last]
		if p, k := testmodel.FirstBitDiff(l.final, l.after[c.steps-1]); p >= 0 {
			t.Fatalf("after Finish, the last joiner (rank %d) holds %s[%d] = %v; its last step gave %v", last, branchNames[p], k,
				l.final[p][k], l.after[c.steps-1][p][k])
		}
	}
}

// valuesAt is the parameters l held before step, or at the end; nil
// where it did not record them (a rank that had joined, or ended early).
func (c *combo) valuesAt(l *rankLog, step int) [][]float64 {
	switch {
	case step < len(l.start):
		return l.start[step]
	case step == c.steps:
		return l.final
	}
	return nil
}

// checkSolverStep checks that the optimizer stepped the gradients rank r
// recorded: SGD's w − lr·g, or nothing after a NonFiniteError.
func checkSolverStep(t *testing.T, c *combo, step, r int, l *rankLog, skipped bool) {
	t.Helper()
	for i, name := range branchNames {
		want := slices.Clone(l.start[step][i])
		if !skipped {
			for k, g := range l.stepped[step][name] {
				want[k] -= comboLR * g
			}
		}
		if e := errorOf(l.after[step][i], want, maxAbs(want), 0); e > exactTol(c.dt) {
			t.Fatalf("step %d: rank %d's optimizer left %s at %v; SGD on the gradient it was given gives %v (error %.3g)",
				step, r, name, testmodel.Short(l.after[step][i]), testmodel.Short(want), e)
		}
	}
}

// checkAveraging checks post-local SGD's model averaging after step:
// every rank then holds the mean of the ranks' parameters.
func (c *combo) checkAveraging(t *testing.T, step int, logs []*rankLog) {
	t.Helper()
	if !c.averaged(step) {
		return
	}
	mean := make([][]float64, len(branchNames))
	for i := range mean {
		mean[i] = make([]float64, len(logs[0].after[step][i]))
		for _, l := range logs {
			for k, x := range l.after[step][i] {
				mean[i][k] += x / float64(len(logs))
			}
		}
	}
	for r, l := range logs {
		got := c.valuesAt(l, step+1)
		for i, name := range branchNames {
			if e := errorOf(got[i], mean[i], maxAbs(mean[i]), 0); e > exactTol(c.dt) {
				t.Fatalf("after step %d, the model averager gave rank %d %s = %v; the mean over ranks is %v (error %.3g)",
					step, r, name, testmodel.Short(got[i]), testmodel.Short(mean[i]), e)
			}
		}
	}
}

// contributions is what each rank put into the buckets at step: the sum
// of its micro-batches' gradients, computed by Gorgonia alone at the
// parameters the rank held (zeros where its graph does not reach, and on
// a rank that has joined).
func contributions(t *testing.T, c *combo, step int, initial [][]float64, logs []*rankLog, plain []*testmodel.Branch,
	contrib []bool) [][][]float64 {
	t.Helper()
	g := make([][][]float64, len(logs))
	for r := range logs {
		g[r] = make([][]float64, len(branchNames))
		for i := range g[r] {
			g[r][i] = make([]float64, len(initial[i]))
		}
		if !contrib[r] {
			continue
		}
		for micro := range c.micro {
			gm, err := plain[r].LocalGrads(logs[r].start[step], step*c.micro+micro, r)
			if err != nil {
				t.Fatal(err)
			}
			for i := range gm {
				for k, x := range gm[i] {
					g[r][i][k] += x
				}
			}
		}
	}
	return g
}

// plan is the bucket plan of step, the same on every rank that trained.
func (c *combo) plan(t *testing.T, step int, logs []*rankLog, contrib []bool) [][]int {
	t.Helper()
	var plan [][]int
	for r, l := range logs {
		if !contrib[r] {
			continue
		}
		if plan == nil {
			plan = l.buckets[step]
		} else if !slices.EqualFunc(plan, l.buckets[step], slices.Equal) {
			t.Fatalf("step %d: rank %d's buckets are %v, another rank's %v", step, r, l.buckets[step], plan)
		}
	}
	return plan
}

// errorOf is max|got − want| beyond abs, relative to scale; +Inf for a
// missing or non-finite gradient.
func errorOf(got, want []float64, scale, abs float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	diff := 0.0
	for k := range want {
		d := math.Abs(got[k] - want[k])
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		diff = max(diff, d-abs)
	}
	if diff <= 0 {
		return 0
	}
	return diff / max(scale, math.SmallestNonzeroFloat64)
}

func maxAbs(vs ...[]float64) float64 {
	m := 0.0
	for _, v := range vs {
		for _, x := range v {
			m = max(m, math.Abs(x))
		}
	}
	return m
}

// exactTol is the error allowed on a path that averages exactly: only
// the order of the sums differs from the reference's.
func exactTol(dt tensor.Dtype) float64 {
	if dt == tensor.Float32 {
		return 1e-5
	}
	return 1e-12
}

func mapToSlice(m map[string][]float64) [][]float64 {
	out := make([][]float64, len(branchNames))
	for i, name := range branchNames {
		out[i] = m[name]
	}
	return out
}
