package gomlxddp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
	"github.com/goddp/ddp/reducer"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// simplegoConfig runs simplego's ops one at a time: its parallel
// executor (the default when one program runs alone) has a data race in
// v0.26.0, which the race detector reports for GoMLX's own Trainer
// without goddp (executeNode reads execBuf.results unlocked while another
// worker writes it); see docs/gomlx.md.
const simplegoConfig = "ops_sequential"

const (
	features = 4
	hidden   = 8
	seed     = 42 // rank 0's initialiser seed, and the reference's
)

// mlp is the test model: a two-layer perceptron with tanh.
func mlp(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := layers.Dense(ctx.In("hidden"), inputs[0], true, hidden)
	x = graph.Tanh(x)
	return []*graph.Node{layers.Dense(ctx.In("out"), x, true, 1)}
}

// batch is step's global batch of rows examples, the same on every rank:
// y = sin(x·w) plus noise.
func batch(step, rows int) (x [][]float64, y [][]float64) {
	rng := rand.New(rand.NewPCG(uint64(step), 7))
	for range rows {
		xi := make([]float64, features)
		s := 0.0
		for j := range xi {
			xi[j] = rng.NormFloat64()
			s += xi[j] * float64(j+1) / features
		}
		x = append(x, xi)
		y = append(y, []float64{s*s/4 - s + 0.1*rng.NormFloat64()})
	}
	return x, y
}

// shard is rank's rows of a global batch split in size equal parts.
func shard(rows [][]float64, rank, size int) *tensors.Tensor {
	n := len(rows) / size
	return tensors.FromValue(rows[rank*n : (rank+1)*n])
}

// newOptimizer is one of the optimizers under test.
func newOptimizer(t testing.TB, name string) optimizers.Interface {
	t.Helper()
	o, err := optimizerByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func optimizerByName(name string) (optimizers.Interface, error) {
	switch name {
	case "sgd":
		return optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(0.05).Done(), nil
	case "adam":
		return optimizers.Adam().LearningRate(0.01).Done(), nil
	}
	return nil, fmt.Errorf("no optimizer %q", name)
}

func newBackend(t testing.TB) backends.Backend {
	t.Helper()
	b, err := simplego.New(simplegoConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Finalize)
	return b
}

func newContext(initSeed int64) *mlctx.Context {
	c := mlctx.New()
	c.SetParam(mlctx.ParamInitialSeed, initSeed)
	return c
}

// values reads every trainable variable of c, by scope and name.
func values(c *mlctx.Context) (map[string][]float64, error) {
	out := map[string][]float64{}
	for v := range c.IterVariables() {
		if !v.Trainable || v.DType() != dtypes.Float64 { // a checkpoint's #rngState comes back trainable
			continue
		}
		val, err := v.Value()
		if err != nil {
			return nil, err
		}
		if out[v.ScopeAndName()], err = tensors.CopyFlatData[float64](val); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reference trains the model alone with GoMLX's own Trainer, on the
// whole batch of each step, and returns the losses and final variables.
func reference(t testing.TB, opt string, steps, rows int) ([]float64, map[string][]float64) {
	t.Helper()
	c := newContext(seed)
	tr := train.NewTrainer(newBackend(t), c, mlp, losses.MeanSquaredError, newOptimizer(t, opt), nil, nil)
	var curve []float64
	for s := range steps {
		x, y := batch(s, rows)
		m, err := tr.TrainStep(nil, []*tensors.Tensor{tensors.FromValue(x)}, []*tensors.Tensor{tensors.FromValue(y)})
		if err != nil {
			t.Fatal(err)
		}
		curve = append(curve, m[0].Value().(float64))
	}
	vals, err := values(c)
	if err != nil {
		t.Fatal(err)
	}
	return curve, vals
}

// rankResult is what one rank of a data-parallel run ends with.
type rankResult struct {
	Losses []float64 // this rank's loss at each step
	Params map[string][]float64
	Copies reducer.CopyStats // the reducer's, at the end
}

// runRanks trains the model data-parallel on size in-process ranks over
// tcp, each starting from different initial values (rank 0's win).
func runRanks(t *testing.T, opt string, size, steps, rows int, o gomlxddp.Options) []rankResult {
	t.Helper()
	return runRanksOn(t, tcpGroups(t, size), opt, steps, rows, o)
}

// runRanksOn is runRanks on the given groups, one per rank.
func runRanksOn(t *testing.T, groups []pg.ProcessGroup, opt string, steps, rows int, o gomlxddp.Options) []rankResult {
	t.Helper()
	return onRanks(t, groups, func(r int) (rankResult, error) { return runRank(t, groups[r], opt, steps, rows, o) })
}

func runRank(t *testing.T, g pg.ProcessGroup, opt string, steps, rows int, o gomlxddp.Options) (rankResult, error) {
	t.Helper()
	optimizer, err := optimizerByName(opt)
	if err != nil {
		return rankResult{}, err
	}
	return trainRank(g, optimizer, steps, rows, o)
}

// trainRank is one rank of a data-parallel run, in this process or a
// worker process: it starts from its own initial values (rank 0's win).
func trainRank(g pg.ProcessGroup, opt optimizers.Interface, steps, rows int, o gomlxddp.Options) (rankResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return rankResult{}, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(1000*g.Rank()))
	tr, err := gomlxddp.New(backend, c, g, mlp, losses.MeanSquaredError, opt, o)
	if err != nil {
		return rankResult{}, err
	}
	defer tr.Close()
	var res rankResult
	for s := range steps {
		x, y := batch(s, rows)
		loss, err := tr.TrainStep(ctx, []*tensors.Tensor{shard(x, g.Rank(), g.Size())},
			[]*tensors.Tensor{shard(y, g.Rank(), g.Size())})
		if err != nil {
			return res, err
		}
		res.Losses = append(res.Losses, loss)
	}
	if err := tr.VerifyReplicas(ctx); err != nil {
		return res, err
	}
	res.Copies = tr.Reducer().CopyStats()
	res.Params, err = values(c)
	return res, err
}

// tcpGroups starts n tcp ranks on loopback, meeting through a HashStore.
func tcpGroups(t testing.TB, n int) []pg.ProcessGroup {
	t.Helper()
	return tcpGroupsWith(t, n, nil)
}

// tcpGroupsWith is tcpGroups with each rank's tcp.Options changed by
// change (nil: none): the shared-memory transport off, a logger.
func tcpGroupsWith(t testing.TB, n int, change func(*tcp.Options)) []pg.ProcessGroup {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	out := make([]pg.ProcessGroup, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			o := tcp.Options{Rank: r, Size: n, Secret: []byte("gomlxddp-test-secret-0123456789"),
				ListenAddr: "127.0.0.1:0", Timeout: 30 * time.Second}
			if change != nil {
				change(&o)
			}
			out[r], errs[r] = tcp.New(ctx, st, o)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, g := range out {
			if g != nil {
				g.Close()
			}
		}
		st.Close()
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// onRanks runs f for every rank of groups at once and returns what each
// returned, failing t with the first rank's error. A rank that fails
// aborts its group, so that the others fail at once instead of waiting
// out the group timeout.
func onRanks[T any](t *testing.T, groups []pg.ProcessGroup, f func(r int) (T, error)) []T {
	t.Helper()
	out := make([]T, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			if out[r], errs[r] = f(r); errs[r] != nil {
				g.Abort(errs[r])
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}
