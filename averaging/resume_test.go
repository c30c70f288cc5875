package averaging_test

import (
	"context"
	"slices"
	"testing"

	"github.com/goddp/ddp/averaging"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest/testworld"
)

// averager is what the two averagers share: a step that may average, and
// the step count a checkpoint saves (Step) and a resumed run restores
// (SetStep).
type averager interface {
	Step() int
	SetStep(int) error
}

// checkResume runs steps of a fresh averager, then saves its Step at
// step cut and resumes a second one from it with SetStep: the second must
// average on exactly the steps the first did after cut, as torch's
// averager does after load_state_dict.
func checkResume[A averager](t *testing.T, fresh func() A, step func(A) int) {
	t.Helper()
	const steps, cut = 12, 5
	a := fresh()
	var whole []int
	var saved int
	for s := range steps {
		if s == cut {
			saved = a.Step()
		}
		whole = append(whole, step(a))
	}
	b := fresh()
	if err := b.SetStep(saved); err != nil {
		t.Fatal(err)
	}
	var resumed []int
	for range steps - cut {
		resumed = append(resumed, step(b))
	}
	if !slices.Equal(resumed, whole[cut:]) {
		t.Errorf("resumed at step %d: %v, want %v (the uninterrupted run: %v)", saved, resumed, whole[cut:], whole)
	}
	if b.Step() != steps {
		t.Errorf("Step() = %d after the resumed run, want %d", b.Step(), steps)
	}
	if err := b.SetStep(-1); err == nil {
		t.Error("SetStep(-1) accepted")
	}
}

func TestPeriodicResumes(t *testing.T) {
	g := testworld.Local(t, 1)[0]
	params := []pg.Tensor{pg.Float32s([]float32{1, 2})}
	checkResume(t, func() *averaging.PeriodicModelAverager {
		a, err := averaging.NewPeriodicModelAverager(g, averaging.PeriodicOptions{Period: 3, WarmupSteps: 2})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}, func(a *averaging.PeriodicModelAverager) int {
		did, err := a.AverageParameters(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		if did {
			return 1
		}
		return 0
	})
}

func TestHierarchicalResumes(t *testing.T) {
	g := testworld.Local(t, 1)[0]
	params := []pg.Tensor{pg.Float64s([]float64{1, 2})}
	checkResume(t, func() *averaging.HierarchicalModelAverager {
		a, err := averaging.NewHierarchicalModelAverager(context.Background(), g, averaging.HierarchicalOptions{
			Levels: []averaging.Level{{Period: 4, GroupSize: 1}}, WarmupSteps: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a
	}, func(a *averaging.HierarchicalModelAverager) int {
		size, err := a.AverageParameters(context.Background(), params)
		if err != nil {
			t.Fatal(err)
		}
		return size
	})
}
