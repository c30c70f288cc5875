package reducer

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The worlds and helpers every test here uses (package testworld).

func world(t testing.TB, n int) []*local.Group { return testworld.Local(t, n) }

func groupsOf(t testing.TB, backend string, n int) []pg.ProcessGroup {
	return testworld.Groups(t, backend, n)
}

func onRanks(gs []*local.Group, f func(rank int, g pg.ProcessGroup) error) []error {
	return testworld.OnGroups(gs, f)
}

func onGroups(gs []pg.ProcessGroup, f func(rank int, g pg.ProcessGroup) error) []error {
	return testworld.OnGroups(gs, f)
}

func parallel(n int, f func(r int) error) []error { return testworld.Parallel(n, f) }

func noErrors(t testing.TB, errs []error) { t.Helper(); testworld.NoErrors(t, errs) }

func testCtx(t testing.TB) context.Context { return testworld.Ctx(t) }

// mlpParams describes a small MLP's parameters, float64.
func mlpParams(sizes ...int) []Param {
	var ps []Param
	for i := 0; i+1 < len(sizes); i++ {
		ps = append(ps,
			Param{Name: fmt.Sprintf("fc%d.weight", i+1), Shape: []int{sizes[i], sizes[i+1]}, Dtype: pg.Float64},
			Param{Name: fmt.Sprintf("fc%d.bias", i+1), Shape: []int{sizes[i+1]}, Dtype: pg.Float64})
	}
	return ps
}

// benchParams describes a float32 MLP's parameters as the root package's
// benchmarks build them: fc1.weight, fc1.bias (shape [1, n]), fc2.weight, ...
func benchParams(sizes ...int) []Param {
	var ps []Param
	for i := 0; i+1 < len(sizes); i++ {
		ps = append(ps,
			Param{Name: fmt.Sprintf("fc%d.weight", i+1), Shape: []int{sizes[i], sizes[i+1]}, Dtype: pg.Float32},
			Param{Name: fmt.Sprintf("fc%d.bias", i+1), Shape: []int{1, sizes[i+1]}, Dtype: pg.Float32})
	}
	return ps
}

// doneHook is a comm hook that communicates nothing and returns a Work
// that has already finished, the same one every time, so it allocates
// nothing.
type doneHook struct{ w pg.Work }

func newDoneHook() doneHook { return doneHook{w: pg.Completed(nil)} }

func (h doneHook) Run(context.Context, pg.ProcessGroup, *commhook.GradBucket) pg.Work { return h.w }

// iterate is one synchronised iteration, gradients marked last first.
func iterate(ctx context.Context, r *Reducer, grads []pg.Tensor) error {
	if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
		return err
	}
	for i := len(grads) - 1; i >= 0; i-- {
		if err := r.MarkReady(i, grads[i]); err != nil {
			return err
		}
	}
	return r.Finalize(ctx)
}

// randomGrads gives each parameter a float32 gradient of its size.
func randomGrads(params []Param) []pg.Tensor {
	out := make([]pg.Tensor, len(params))
	for i, p := range params {
		out[i] = pg.Float32s(uniform[float32](p.Numel(), 1, uint64(i), 1))
	}
	return out
}

// uniform is n values in [-scale, scale) from a PCG seeded with (seed, stream).
func uniform[T float32 | float64](n int, seed, stream uint64, scale float64) []T {
	rng := rand.New(rand.NewPCG(seed, stream))
	out := make([]T, n)
	for i := range out {
		out[i] = T(scale * (2*rng.Float64() - 1))
	}
	return out
}

// observedOptions are the sinks of the observed side: metrics and the
// sampled logging data (a logger that formats and discards its lines).
func observedOptions() Options {
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard),
		zapcore.InfoLevel)
	return Options{Registerer: prometheus.NewRegistry(), Logger: zap.New(core)}
}
