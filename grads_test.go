package ddp

import (
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestSharedMemoryFoundAtRunTime: when parameter b's gradient is a view
// into a's (different nodes over one memory, which the structural check
// of Grad cannot see), the first run's probe gives b memory of its own,
// and each parameter gets its own average. Rank 1's b is separate memory,
// so the two averages differ. Gorgonia gave no such view in any graph
// tried (Reshape copies), so the hook is called directly.
func TestSharedMemoryFoundAtRunTime(t *testing.T) {
	ctx := testCtx(t)
	gs := groupsOf(t, "local", 2)
	ds := make([]*DDP, 2)
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		gr := G.NewGraph()
		a := G.NewMatrix(gr, tensor.Float64, G.WithShape(2, 3), G.WithName("a"), G.WithInit(G.Zeroes()))
		b := G.NewVector(gr, tensor.Float64, G.WithShape(3), G.WithName("b"), G.WithInit(G.Zeroes()))
		var err error
		ds[r], err = Wrap(ctx, g, G.Nodes{a, b}, Options{})
		return err
	}))
	for _, d := range ds { // one graph at a time
		sa, err := G.Sum(d.Node(0))
		if err != nil {
			t.Fatal(err)
		}
		sb, err := G.Sum(d.Node(1))
		if err != nil {
			t.Fatal(err)
		}
		cost, err := G.Add(sa, sb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Grad(cost); err != nil {
			t.Fatal(err)
		}
	}
	ga := []*tensor.Dense{
		tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6})),
		tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{10, 20, 30, 40, 50, 60})),
	}
	gb := []*tensor.Dense{
		tensor.New(tensor.WithShape(3), tensor.WithBacking(ga[0].Float64s()[:3])), // a view into a's gradient
		tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{100, 200, 300})),
	}
	outB := make([]G.Value, 2)
	noErrors(t, parallel(2, func(r int) error {
		d := ds[r]
		d.probe, d.seen = true, nil
		if err := d.r.Prepare(ctx, reducer.Iteration{Sync: true}); err != nil {
			return err
		}
		if out, err := d.hookGradient(0, ga[r]); err != nil || out != nil {
			return fmt.Errorf("a: %v, %v", out, err)
		}
		var err error
		if outB[r], err = d.hookGradient(1, gb[r]); err != nil {
			return err
		}
		return d.r.Finalize(ctx)
	}))
	if !ds[0].shared[1] || ds[1].shared[1] {
		t.Fatalf("shared b: rank 0 %v, rank 1 %v; want true, false", ds[0].shared[1], ds[1].shared[1])
	}
	wantA := []float64{5.5, 11, 16.5, 22, 27.5, 33}
	wantB := []float64{50.5, 101, 151.5}
	for r := range 2 {
		if got := ga[r].Float64s(); fmt.Sprint(got) != fmt.Sprint(wantA) {
			t.Errorf("rank %d: a's gradient is %v, want %v", r, got, wantA)
		}
		b := gb[r]
		if outB[r] != nil {
			b = outB[r].(*tensor.Dense)
		}
		if got := b.Float64s(); fmt.Sprint(got) != fmt.Sprint(wantB) {
			t.Errorf("rank %d: b's gradient is %v, want %v", r, got, wantB)
		}
	}
}
