package commhook_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runHook runs h on every rank's bucket at once and waits.
func runHook(t *testing.T, h commhook.Hook, bufs []pg.Tensor) {
	t.Helper()
	gs, err := local.New(len(bufs), local.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range gs {
			g.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(gs))
	for r, g := range gs {
		wg.Go(func() {
			b := &commhook.GradBucket{Buffer: bufs[r], IsLast: true}
			errs[r] = h.Run(ctx, g, b).Wait(ctx)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// Allreduce divides by the world size, then sums: torch's allreduce_hook.
// With 3 ranks the division is not exact, so the order shows in the bits.
func TestAllreduceDividesThenSums(t *testing.T) {
	in := [][]float32{{1, 2, 0.1}, {3, 5, 0.2}, {7, 11, 0.3}}
	bufs := make([]pg.Tensor, len(in))
	for r := range in {
		bufs[r] = pg.Float32s(slices.Clone(in[r]))
	}
	runHook(t, commhook.Allreduce{}, bufs)
	want := make([]float32, 3)
	for j := range want {
		for r := range in { // the serial reference: x/3 on each rank, summed in rank order
			want[j] += in[r][j] / 3
		}
	}
	for r, b := range bufs {
		if got := pg.View[float32](b); !slices.Equal(got, want) {
			t.Errorf("rank %d: got %v, want %v", r, got, want)
		}
	}
}

func TestDivideRejectsIntegers(t *testing.T) {
	if err := commhook.Divide(pg.Int32s([]int32{4}), 2); err == nil {
		t.Fatal("dividing an int32 bucket succeeded")
	}
	got := []float64{3, 9}
	if err := commhook.Divide(pg.Float64s(got), 3); err != nil || got[0] != 1 || got[1] != 3 {
		t.Fatalf("Divide float64: %v %v", got, err)
	}
}

func TestNoopLeavesTheBucket(t *testing.T) {
	bufs := []pg.Tensor{pg.Float32s([]float32{1, 2}), pg.Float32s([]float32{3, 4})}
	runHook(t, commhook.Noop{}, bufs)
	if got := pg.View[float32](bufs[1]); !slices.Equal(got, []float32{3, 4}) {
		t.Fatalf("noop changed the bucket: %v", got)
	}
}

func TestNames(t *testing.T) {
	custom := commhook.HookFunc(func(context.Context, pg.ProcessGroup, *commhook.GradBucket) pg.Work {
		return pg.Completed(errors.New("x"))
	})
	for h, want := range map[commhook.Hook]string{commhook.Allreduce{}: "allreduce", commhook.Noop{}: "noop"} {
		if got := commhook.Name(h); got != want {
			t.Errorf("Name = %q, want %q", got, want)
		}
	}
	if got := commhook.Name(custom); got != "custom" {
		t.Errorf("Name(HookFunc) = %q, want custom", got)
	}
}

func TestGradientViews(t *testing.T) {
	b := commhook.GradBucket{
		Buffer: pg.Float32s([]float32{1, 2, 3, 4, 5}),
		Params: []commhook.ParamView{{Index: 1, Offset: 0, Len: 2}, {Index: 0, Offset: 2, Len: 3}},
	}
	if got := pg.View[float32](b.Gradient(1)); !slices.Equal(got, []float32{3, 4, 5}) {
		t.Fatalf("Gradient(1) = %v", got)
	}
}

func TestByNameBuildsEveryBuiltIn(t *testing.T) {
	for _, name := range commhook.Names() {
		h, err := commhook.ByName(name, commhook.DefaultPowerSGDOptions())
		if err != nil || commhook.Name(h) == "custom" {
			t.Errorf("ByName(%q) = %v (named %q), %v", name, h, commhook.Name(h), err)
		}
	}
	if _, err := commhook.ByName("zip", commhook.DefaultPowerSGDOptions()); err == nil {
		t.Error("ByName accepted an unknown hook")
	}
}
