package reducer

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// ddp_gradient_copy_bytes_total counts what CopyStats counts: one
// gradient placed in its bucket view, one copied in and back, over two
// iterations on one rank.
func TestCopyBytesMetric(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 2) // fc1.weight: 6 float64, fc1.bias: 2
	reg := prometheus.NewRegistry()
	noErrors(t, onRanks(world(t, 1), func(_ int, g pg.ProcessGroup) error {
		r, err := New(ctx, g, params, Options{GradientAsBucketView: true, Registerer: reg})
		if err != nil {
			return err
		}
		own := pg.NewTensor(pg.Float64, 2)
		for range 2 {
			if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
				return err
			}
			if err := r.MarkReady(1, own); err != nil {
				return err
			}
			if err := r.MarkReady(0, r.GradientBuffer(0)); err != nil {
				return err
			}
			if err := r.Finalize(ctx); err != nil {
				return err
			}
		}
		if st := r.CopyStats(); st != (CopyStats{In: 32, Out: 32, InPlace: 96, Fallbacks: 2}) {
			return fmt.Errorf("CopyStats = %+v", st)
		}
		return nil
	}))
	want := `
# HELP ddp_gradient_copy_bytes_total Gradient bytes the reducer copied into buckets (in), back into gradients (out), ` +
		`or found already in their bucket view (in_place, GradientAsBucketView).
# TYPE ddp_gradient_copy_bytes_total counter
ddp_gradient_copy_bytes_total{backend="local",direction="in",rank="0"} 32
ddp_gradient_copy_bytes_total{backend="local",direction="in_place",rank="0"} 96
ddp_gradient_copy_bytes_total{backend="local",direction="out",rank="0"} 32
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ddp_gradient_copy_bytes_total"); err != nil {
		t.Error(err)
	}
}

// Two gradients over one memory cannot each receive a result: Finalize
// fails on the rank that gave them, naming both parameters, instead of
// writing one average over the other (Note [one memory per result]).
func TestSharedGradientsRefused(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 2) // fc1.weight: 6 float64, fc1.bias: 2
	noErrors(t, onRanks(world(t, 1), func(_ int, g pg.ProcessGroup) error {
		r, err := New(ctx, g, params, Options{})
		if err != nil {
			return err
		}
		w := pg.NewTensor(pg.Float64, 6)
		bias := pg.Tensor{Dtype: pg.Float64, Data: w.Data[8:24]} // elements 1 and 2 of the weight's gradient
		if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
			return err
		}
		if err := r.MarkReady(1, bias); err != nil {
			return err
		}
		if err := r.MarkReady(0, w); err != nil {
			return err
		}
		err = r.Finalize(ctx)
		if !errors.Is(err, ErrSharedGradients) || !strings.Contains(err.Error(), "0 (fc1.weight) and 1 (fc1.bias)") {
			return fmt.Errorf("Finalize = %v; want ErrSharedGradients naming fc1.weight and fc1.bias", err)
		}
		return nil
	}))
}
