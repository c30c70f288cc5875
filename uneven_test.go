package ddp

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// TestGorgoniaJoin trains the MLP through Wrap on 3 ranks with 3, 5 and
// 8 batches under a Join, with Gorgonia's vanilla SGD. The reference is
// torch's rule computed directly: at iteration t each rank with more than
// t batches computes its gradient on its own batch (a plain model with the
// current weights), the sum is divided by the world size, and the weights
// take one SGD step. Every rank ends with the last joiner's weights.
func TestGorgoniaJoin(t *testing.T) {
	batches := []int{3, 5, 8}
	const lr = 0.1
	spec := mlpSpec{sizes: mlpSizes(), rows: 4}
	data := func(r, step int) batch[float64] { return makeBatch[float64](spec, spec.rows, uint64(1000+10*r+step)) }
	ctx := testCtx(t)
	gs := groupsOf(t, "tcp", len(batches))
	replicas := make([]*mlp[float64], len(batches))
	for r := range replicas {
		replicas[r] = newMLP[float64](t, spec, referenceSeed)
	}
	var building sync.Mutex
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		m := replicas[r]
		if err := m.wrap(ctx, g, Options{}); err != nil {
			return err
		}
		building.Lock()
		err := m.build(t)
		building.Unlock()
		if err != nil {
			return err
		}
		j, err := m.ddp.NewJoin(reducer.JoinOptions{})
		if err != nil {
			return err
		}
		s := newSolver("sgd")
		for step := range batches[r] {
			if err := j.Step(ctx, true); err != nil {
				return err
			}
			if err := m.feed(data(r, step)); err != nil {
				return err
			}
			if err := m.run(ctx); err != nil {
				return err
			}
			if err := m.step(s); err != nil {
				return err
			}
		}
		return j.Finish(ctx)
	}))

	ref := newMLP[float64](t, spec, referenceSeed).mustBuild(t)
	w := ref.values()
	for step := range 8 {
		sum := make([][]float64, len(w))
		for i := range w {
			sum[i] = make([]float64, len(w[i]))
		}
		for r, b := range batches {
			if b <= step {
				continue
			}
			for i, p := range ref.params {
				copy(p.Value().Data().([]float64), w[i])
			}
			if err := ref.feed(data(r, step)); err != nil {
				t.Fatal(err)
			}
			if err := ref.vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			for i, g := range ref.gradients() {
				for k := range g {
					sum[i][k] += g[k] / float64(len(batches))
				}
			}
			ref.vm.Reset()
		}
		for i := range w {
			for k := range w[i] {
				w[i][k] -= lr * sum[i][k]
			}
		}
	}
	for r, m := range replicas {
		got := m.values()
		for i := range w {
			for k := range w[i] {
				if d := math.Abs(got[i][k] - w[i][k]); d > 1e-9*max(1, math.Abs(w[i][k])) {
					t.Fatalf("rank %d %s[%d]: %v, want %v (torch's Join rule)", r, m.params[i].Name(), k, got[i][k], w[i][k])
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(replicas[0].values()) {
			t.Fatalf("rank %d's replica differs from rank 0's", r)
		}
	}
}
