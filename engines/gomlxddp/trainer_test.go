package gomlxddp_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp"
	"github.com/goddp/ddp/reducer"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestSameAsOneProcess: N ranks, each on its shard of every batch, end
// with the parameters that GoMLX's own Trainer reaches alone on the whole
// batches, and with the same bits on every rank, over tcp both ways the
// ranks of one host can talk: through the shared-memory transport (the
// default; checked to be in use: every rank's "link transports" line
// names every other rank under shm, so its world is the whole group and
// AllReduce moves the data through the segments) and over TCP alone
// (tcp.Options.NoSharedMemory; the line names every other rank under
// tcp).
func TestSameAsOneProcess(t *testing.T) {
	const steps, rows = 12, 12
	for _, opt := range []string{"sgd", "adam"} {
		_, want := reference(t, opt, steps, rows)
		for _, size := range []int{2, 3} {
			for _, transport := range []string{"shm", "tcp"} {
				t.Run(fmt.Sprintf("%s/%d/%s", opt, size, transport), func(t *testing.T) {
					if transport == "shm" && runtime.GOOS != "linux" {
						t.Skip("the shared-memory transport is Linux-only")
					}
					groups, logs := transportGroups(t, size, transport == "tcp")
					checkTransports(t, logs, transport)
					got := runRanksOn(t, groups, opt, steps, rows, gomlxddp.Options{})
					checkClose(t, got[0].Params, want, 1e-9)
					for r := 1; r < size; r++ {
						checkBitwise(t, r, got[r].Params, got[0].Params)
					}
				})
			}
		}
	}
}

// transportGroups is tcpGroups with the shared-memory transport on or
// off, and each rank's log.
func transportGroups(t *testing.T, size int, noShm bool) ([]pg.ProcessGroup, []*observer.ObservedLogs) {
	t.Helper()
	logs := make([]*observer.ObservedLogs, size)
	loggers := make([]*zap.Logger, size)
	for r := range size {
		var core zapcore.Core
		core, logs[r] = observer.New(zap.InfoLevel)
		loggers[r] = zap.New(core)
	}
	groups := tcpGroupsWith(t, size, func(o *tcp.Options) {
		o.NoSharedMemory, o.Logger = noShm, loggers[o.Rank]
	})
	return groups, logs
}

// checkTransports wants every rank to reach every other one through
// transport, "shm" or "tcp", as its "link transports" line says.
func checkTransports(t *testing.T, logs []*observer.ObservedLogs, transport string) {
	t.Helper()
	for r, l := range logs {
		lines := l.FilterMessage("link transports").All()
		if len(lines) != 1 {
			t.Fatalf("rank %d: %d \"link transports\" lines, want 1", r, len(lines))
		}
		var others []any
		for j := range logs {
			if j != r {
				others = append(others, j)
			}
		}
		fields := lines[0].ContextMap()
		if got, want := fmt.Sprint(fields[transport]), fmt.Sprint(others); got != want {
			t.Fatalf("rank %d reaches %s over %s (link transports: %v), want %s", r, got, transport, fields, want)
		}
	}
}

func checkClose(t *testing.T, got, want map[string][]float64, tol float64) {
	t.Helper()
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("%d trainable variables, want %d", len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		if len(g) != len(w) {
			t.Fatalf("%s: %d values, want %d", name, len(g), len(w))
		}
		for i := range w {
			if d := math.Abs(g[i] - w[i]); d > tol*math.Max(1, math.Abs(w[i])) || math.IsNaN(g[i]) {
				t.Fatalf("%s[%d] = %v, one process on the whole batch: %v (diff %.3g)", name, i, g[i], w[i], d)
			}
		}
	}
}

func checkBitwise(t *testing.T, rank int, got, rank0 map[string][]float64) {
	t.Helper()
	for name, w := range rank0 {
		g := got[name]
		for i := range w {
			if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
				t.Fatalf("rank %d: %s[%d] = %v, rank 0 has %v: replicas differ", rank, name, i, g[i], w[i])
			}
		}
	}
	if len(got) != len(rank0) || !slices.Equal(keys(got), keys(rank0)) {
		t.Fatalf("rank %d has variables %v, rank 0 %v", rank, keys(got), keys(rank0))
	}
}

func keys(m map[string][]float64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestBucketsAndHook: with small buckets the gradients travel in several
// buckets, through a comm hook of the user's, and the result is the same.
func TestBucketsAndHook(t *testing.T) {
	const steps, rows, size = 6, 12, 2
	_, want := reference(t, "sgd", steps, rows)
	var calls atomic.Int64
	hook := commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
		calls.Add(1)
		return commhook.Allreduce{}.Run(ctx, g, b)
	})
	o := gomlxddp.Options{Reducer: reducer.Options{BucketCapBytes: 64, FirstBucketBytes: 64, Hook: hook}}
	got := runRanks(t, "sgd", size, steps, rows, o)
	checkClose(t, got[0].Params, want, 1e-9)
	checkBitwise(t, 1, got[1].Params, got[0].Params)
	// The same with the gradients in their buckets: GradientAsBucketView.
	o.Reducer.GradientAsBucketView = true
	viewed := runRanks(t, "sgd", size, steps, rows, o)
	checkBitwise(t, 0, viewed[0].Params, got[0].Params)
	checkBitwise(t, 1, viewed[1].Params, got[0].Params)
	if viewed[0].Copies.In != 0 || got[0].Copies.In == 0 {
		t.Errorf("the reducer copied %d bytes in with GradientAsBucketView, %d without; want none with", viewed[0].Copies.In,
			got[0].Copies.In)
	}
	// The first iteration has one bucket (DDP's rule before the rebuild);
	// later ones one per 64 bytes or so: 4 parameters, 8 float64s each at most.
	t.Logf("hook calls per rank and run: %d", calls.Load()/(2*size))
	if perRank := calls.Load() / (2 * size); perRank < 1+2*(steps-1) {
		t.Errorf("the hook ran %d times per rank in %d steps; want several buckets per step", perRank, steps)
	}
}

// TestRefusedOptions: options this engine cannot honour are refused, with
// the reason.
func TestRefusedOptions(t *testing.T) {
	for name, o := range map[string]gomlxddp.Options{
		"FindUnusedParameters": {Reducer: reducer.Options{FindUnusedParameters: true}},
		"MixedPrecision":       {Reducer: reducer.Options{MixedPrecision: &reducer.MixedPrecision{ParamDtype: pg.BFloat16}}},
		"Timeout":              {Timeout: -1},
	} {
		groups := tcpGroups(t, 1)
		_, err := gomlxddp.New(newBackend(t), newContext(1), groups[0], mlp, nil, newOptimizer(t, "sgd"), o)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: New said %v", name, err)
		}
	}
}

// TestNoSync: two micro-batches per step, the first with TrainStepNoSync:
// the optimizer gets the sum of the two micro-batches' averages, which for
// SGD is one process on the whole batch with twice the learning rate.
func TestNoSync(t *testing.T) {
	const size, micro, steps, rows = 2, 2, 6, 16
	ref := newContext(seed)
	tr := train.NewTrainer(newBackend(t), ref, mlp, losses.MeanSquaredError,
		optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(0.05*micro).Done(), nil, nil)
	for s := range steps {
		x, y := batch(s, rows)
		if _, err := tr.TrainStep(nil, []*tensors.Tensor{tensors.FromValue(x)},
			[]*tensors.Tensor{tensors.FromValue(y)}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := values(ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, view := range []bool{false, true} { // the gradients in their own buffers, or in their buckets
		t.Run(fmt.Sprintf("GradientAsBucketView=%v", view), func(t *testing.T) {
			groups := tcpGroups(t, size)
			got := make([]map[string][]float64, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r := range size {
				wg.Go(func() {
					o := gomlxddp.Options{Reducer: reducer.Options{GradientAsBucketView: view}}
					if got[r], errs[r] = noSyncRank(groups[r], micro, steps, rows, o); errs[r] != nil {
						groups[r].Abort(errs[r])
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			checkClose(t, got[0], want, 1e-9)
			checkBitwise(t, 1, got[1], got[0])
		})
	}
}

func noSyncRank(g pg.ProcessGroup, micro, steps, rows int, o gomlxddp.Options) (map[string][]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(g.Rank()))
	opt, err := optimizerByName("sgd")
	if err != nil {
		return nil, err
	}
	tr, err := gomlxddp.New(backend, c, g, mlp, losses.MeanSquaredError, opt, o)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	for s := range steps {
		x, y := batch(s, rows)
		for m := range micro { // micro-batch m of rank r is shard m·size+r
			step := tr.TrainStepNoSync
			if m == micro-1 {
				step = tr.TrainStep
			}
			k := m*g.Size() + g.Rank()
			if _, err := step(ctx, []*tensors.Tensor{shard(x, k, micro*g.Size())},
				[]*tensors.Tensor{shard(y, k, micro*g.Size())}); err != nil {
				return nil, err
			}
		}
	}
	if tr.Steps() != steps {
		return nil, fmt.Errorf("%d optimizer steps, want %d", tr.Steps(), steps)
	}
	return values(c)
}

// TestDifferentModels: ranks whose models or optimizers differ fail
// together at set-up, saying so, instead of hanging or training apart.
func TestDifferentModels(t *testing.T) {
	wider := func(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
		x := graph.Tanh(layers.Dense(ctx.In("hidden"), inputs[0], true, hidden+1))
		return []*graph.Node{layers.Dense(ctx.In("out"), x, true, 1)}
	}
	for name, c := range map[string]struct {
		model     func(*mlctx.Context, any, []*graph.Node) []*graph.Node
		optimizer string
		want      string
	}{
		"model":     {wider, "sgd", "the same model on every rank"},
		"optimizer": {mlp, "adam", "different variables"},
	} {
		t.Run(name, func(t *testing.T) {
			groups := tcpGroups(t, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Go(func() {
					model, opt := mlp, "sgd"
					if r == 1 {
						model, opt = c.model, c.optimizer
					}
					tr, err := gomlxddp.New(newBackend(t), newContext(seed), groups[r], model, losses.MeanSquaredError,
						newOptimizer(t, opt), gomlxddp.Options{Timeout: 20 * time.Second})
					if err != nil {
						errs[r] = err
						return
					}
					defer tr.Close()
					x, y := batch(0, 4)
					_, errs[r] = tr.TrainStep(context.Background(), []*tensors.Tensor{shard(x, r, 2)},
						[]*tensors.Tensor{shard(y, r, 2)})
				})
			}
			wg.Wait()
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("rank %d: %v; want an error saying %q", r, err, c.want)
				}
			}
		})
	}
}

// clippedMLP registers a per-step update function, as a weight
// constraint would: after each optimizer step, the hidden weights are
// clipped to [-0.3, 0.3].
func clippedMLP(ctx *mlctx.Context, spec any, inputs []*graph.Node) []*graph.Node {
	out := mlp(ctx, spec, inputs)
	train.AddPerStepUpdateGraphFn(ctx.In("clip"), inputs[0].Graph(), func(ctx *mlctx.Context, g *graph.Graph) {
		v := ctx.GetVariableByScopeAndName("/hidden/dense", "weights")
		v.SetValueGraph(graph.ClipScalar(v.ValueGraph(g), -0.3, 0.3))
	})
	return out
}

// TestPerStepUpdate: functions the model registers with
// train.AddPerStepUpdateGraphFn run after each update, as under GoMLX's
// Trainer: two ranks end where the Trainer does alone.
func TestPerStepUpdate(t *testing.T) {
	const size, steps, rows = 2, 8, 12
	ref := newContext(seed)
	tr := train.NewTrainer(newBackend(t), ref, clippedMLP, losses.MeanSquaredError, newOptimizer(t, "adam"), nil, nil)
	for s := range steps {
		x, y := batch(s, rows)
		if _, err := tr.TrainStep(nil, []*tensors.Tensor{tensors.FromValue(x)},
			[]*tensors.Tensor{tensors.FromValue(y)}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := values(ref)
	if err != nil {
		t.Fatal(err)
	}
	clipped := 0
	for _, w := range want["/hidden/dense/weights"] {
		if math.Abs(w) == 0.3 {
			clipped++
		}
	}
	if clipped == 0 {
		t.Fatal("no weight reached the clip: the test checks nothing")
	}
	groups := tcpGroups(t, size)
	got := onRanks(t, groups,
		func(r int) (map[string][]float64, error) { return modelRank(groups[r], clippedMLP, steps, rows) })
	checkClose(t, got[0], want, 1e-9)
	checkBitwise(t, 1, got[1], got[0])
}

// modelRank trains model with Adam on this rank's shards.
func modelRank(g pg.ProcessGroup, model train.ModelFn, steps, rows int) (map[string][]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(g.Rank()))
	opt, err := optimizerByName("adam")
	if err != nil {
		return nil, err
	}
	tr, err := gomlxddp.New(backend, c, g, model, losses.MeanSquaredError, opt, gomlxddp.Options{})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	for s := range steps {
		x, y := batch(s, rows)
		if _, err := tr.TrainStep(ctx, []*tensors.Tensor{shard(x, g.Rank(), g.Size())},
			[]*tensors.Tensor{shard(y, g.Rank(), g.Size())}); err != nil {
			return nil, err
		}
	}
	return values(c)
}

// TestNewBatchSize: a step with another batch size (an epoch's short last
// batch) builds a second gradient graph; training goes on as GoMLX's
// Trainer does alone.
func TestNewBatchSize(t *testing.T) {
	const size = 2
	rowsAt := []int{12, 12, 8, 12, 4} // global rows per step
	ref := newContext(seed)
	tr := train.NewTrainer(newBackend(t), ref, mlp, losses.MeanSquaredError, newOptimizer(t, "adam"), nil, nil)
	for s, rows := range rowsAt {
		x, y := batch(s, rows)
		if _, err := tr.TrainStep(nil, []*tensors.Tensor{tensors.FromValue(x)},
			[]*tensors.Tensor{tensors.FromValue(y)}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := values(ref)
	if err != nil {
		t.Fatal(err)
	}
	groups := tcpGroups(t, size)
	got := onRanks(t, groups, func(r int) (map[string][]float64, error) { return rowsRank(groups[r], rowsAt) })
	checkClose(t, got[0], want, 1e-9)
	checkBitwise(t, 1, got[1], got[0])
}

func rowsRank(g pg.ProcessGroup, rowsAt []int) (map[string][]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(g.Rank()))
	opt, err := optimizerByName("adam")
	if err != nil {
		return nil, err
	}
	tr, err := gomlxddp.New(backend, c, g, mlp, losses.MeanSquaredError, opt, gomlxddp.Options{})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	for s, rows := range rowsAt {
		x, y := batch(s, rows)
		if _, err := tr.TrainStep(ctx, []*tensors.Tensor{shard(x, g.Rank(), g.Size())},
			[]*tensors.Tensor{shard(y, g.Rank(), g.Size())}); err != nil {
			return nil, fmt.Errorf("step %d (%d rows): %w", s, rows, err)
		}
	}
	return values(c)
}

// TestNonFiniteSkipped: with CheckFinite, a NaN in one rank's input makes
// every rank's step return ErrNonFinite and skip its update; training goes
// on, and ends where GoMLX's Trainer ends without that step.
func TestNonFiniteSkipped(t *testing.T) {
	const size, steps, rows, bad = 2, 6, 12, 2
	ref := newContext(seed)
	tr := train.NewTrainer(newBackend(t), ref, mlp, losses.MeanSquaredError, newOptimizer(t, "adam"), nil, nil)
	for s := range steps {
		if s == bad {
			continue
		}
		x, y := batch(s, rows)
		if _, err := tr.TrainStep(nil, []*tensors.Tensor{tensors.FromValue(x)},
			[]*tensors.Tensor{tensors.FromValue(y)}); err != nil {
			t.Fatal(err)
		}
	}
	want, err := values(ref)
	if err != nil {
		t.Fatal(err)
	}
	groups := tcpGroups(t, size)
	got := onRanks(t, groups, func(r int) (map[string][]float64, error) { return nanRank(groups[r], steps, rows, bad) })
	checkClose(t, got[0], want, 1e-9)
	checkBitwise(t, 1, got[1], got[0])
}

// nanRank trains with CheckFinite; at step bad rank 1's first feature is
// NaN. Every rank must see ErrNonFinite there and nowhere else.
func nanRank(g pg.ProcessGroup, steps, rows, bad int) (map[string][]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(g.Rank()))
	opt, err := optimizerByName("adam")
	if err != nil {
		return nil, err
	}
	tr, err := gomlxddp.New(backend, c, g, mlp, losses.MeanSquaredError, opt,
		gomlxddp.Options{Reducer: reducer.Options{CheckFinite: true}})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	for s := range steps {
		x, y := batch(s, rows)
		if s == bad && g.Rank() == 1 {
			x[rows/2][0] = math.NaN() // the first row of rank 1's shard
		}
		_, err := tr.TrainStep(ctx, []*tensors.Tensor{shard(x, g.Rank(), g.Size())},
			[]*tensors.Tensor{shard(y, g.Rank(), g.Size())})
		if nonFinite := errors.Is(err, reducer.ErrNonFinite); nonFinite != (s == bad) || (err != nil && !nonFinite) {
			return nil, fmt.Errorf("step %d: %v", s, err)
		}
	}
	if tr.Steps() != steps-1 {
		return nil, fmt.Errorf("%d optimizer steps, want %d", tr.Steps(), steps-1)
	}
	return values(c)
}
