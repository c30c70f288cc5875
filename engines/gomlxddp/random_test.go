package gomlxddp_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// dropoutMLP is mlp with dropout on the hidden layer: GoMLX's layer,
// active because the gradient graph is a training graph.
func dropoutMLP(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := layers.Dense(ctx.In("hidden"), inputs[0], true, hidden)
	x = layers.DropoutStatic(ctx, graph.Tanh(x), 0.5)
	return []*graph.Node{layers.Dense(ctx.In("out"), x, true, 1)}
}

// dropoutRun is one data-parallel run of dropoutMLP with Adam.
type dropoutRun struct {
	from, to   int  // the steps run: batch(s, rows) for s in [from, to)
	rows       int  // rows of the global batch
	sameInputs bool // every rank trains on the whole batch instead of its shard
	noSync     bool // each step is a TrainStepNoSync, then a TrainStep, on the same inputs
	opts       gomlxddp.Options
	load, save string // a checkpoint rank 0 loads before the first step, saves after the last
}

// dropoutResult is what one rank of a dropoutRun ends with.
type dropoutResult struct {
	Losses []float64 // every call's loss, the no-sync ones included
	Params map[string][]float64
}

// runDropout runs r on size ranks over tcp.
func runDropout(t *testing.T, size int, r dropoutRun) []dropoutResult {
	t.Helper()
	groups := tcpGroups(t, size)
	return onRanks(t, groups, func(rank int) (dropoutResult, error) { return dropoutRank(groups[rank], r) })
}

func dropoutRank(g pg.ProcessGroup, r dropoutRun) (dropoutResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend, err := simplego.New(simplegoConfig)
	if err != nil {
		return dropoutResult{}, err
	}
	defer backend.Finalize()
	c := newContext(seed + int64(1000*g.Rank())) // rank 0's random state wins
	var ckpt *checkpoints.Handler
	if g.Rank() == 0 && r.load+r.save != "" {
		if ckpt, err = checkpoints.Build(c).Dir(r.load + r.save).Done(); err != nil {
			return dropoutResult{}, err
		}
	}
	tr, err := gomlxddp.New(backend, c, g, dropoutMLP, losses.MeanSquaredError, newAdam(), r.opts)
	if err != nil {
		return dropoutResult{}, err
	}
	defer tr.Close()
	var res dropoutResult
	for s := r.from; s < r.to; s++ {
		losses, err := dropoutStep(ctx, tr, g, r, s)
		if err != nil {
			return res, err
		}
		res.Losses = append(res.Losses, losses...)
	}
	if ckpt != nil && r.save != "" {
		if err := ckpt.Save(); err != nil {
			return res, err
		}
	}
	res.Params, err = values(c)
	return res, err
}

// dropoutStep is step s of r: its losses, after checking that every
// rank holds the same parameters.
func dropoutStep(ctx context.Context, tr *gomlxddp.Trainer, g pg.ProcessGroup, r dropoutRun, s int) ([]float64, error) {
	xs, ys := batch(s, r.rows)
	x, y := shard(xs, g.Rank(), g.Size()), shard(ys, g.Rank(), g.Size())
	if r.sameInputs {
		x, y = tensors.FromValue(xs), tensors.FromValue(ys)
	}
	in, lab := []*tensors.Tensor{x}, []*tensors.Tensor{y}
	var out []float64
	if r.noSync {
		loss, err := tr.TrainStepNoSync(ctx, in, lab)
		if err != nil {
			return nil, err
		}
		out = append(out, loss)
	}
	loss, err := tr.TrainStep(ctx, in, lab)
	if err != nil {
		return nil, err
	}
	return append(out, loss), tr.VerifyReplicas(ctx)
}

func newAdam() optimizers.Interface {
	o, err := optimizerByName("adam")
	if err != nil {
		panic(err) // a name optimizerByName knows
	}
	return o
}

// TestPerRankRandomStreams: two ranks train a model with dropout on the
// same inputs. Each rank draws masks of its own (every call's loss
// differs between the ranks), and new ones at every call (a no-sync
// micro-step and the step after it see the same parameters and inputs but
// give different losses), while the parameters stay bitwise equal on both
// ranks after every step. With SameRandomAcrossRanks, as before per-rank
// streams, both ranks draw the same masks: the same losses.
func TestPerRankRandomStreams(t *testing.T) {
	run := dropoutRun{to: 6, rows: 8, sameInputs: true, noSync: true}
	res := runDropout(t, 2, run)
	for i := range res[0].Losses {
		if res[0].Losses[i] == res[1].Losses[i] {
			t.Fatalf("call %d: both ranks have loss %v: they drew the same dropout mask", i, res[0].Losses[i])
		}
	}
	for r := range res {
		for s := 0; s < len(res[r].Losses); s += 2 {
			if res[r].Losses[s] == res[r].Losses[s+1] {
				t.Fatalf("rank %d, step %d: the no-sync call and the step have loss %v: the mask did not change",
					r, s/2, res[r].Losses[s])
			}
		}
	}
	checkBitwise(t, 1, res[1].Params, res[0].Params)

	run.opts.SameRandomAcrossRanks = true
	same := runDropout(t, 2, run)
	if !reflect.DeepEqual(same[0].Losses, same[1].Losses) {
		t.Fatalf("SameRandomAcrossRanks: the ranks' losses differ: %v and %v", same[0].Losses, same[1].Losses)
	}
	checkBitwise(t, 1, same[1].Params, same[0].Params)
}

// TestRandomStreamsReproducible: two runs with the same seeds draw the
// same masks (bitwise the same losses and parameters on every rank); a
// different Options.Seed draws others.
func TestRandomStreamsReproducible(t *testing.T) {
	run := dropoutRun{to: 4, rows: 8, noSync: true}
	a, b := runDropout(t, 2, run), runDropout(t, 2, run)
	for r := range a {
		if !reflect.DeepEqual(a[r].Losses, b[r].Losses) {
			t.Fatalf("rank %d: two runs with the same seed have losses %v and %v", r, a[r].Losses, b[r].Losses)
		}
		checkBitwise(t, r, b[r].Params, a[r].Params)
	}
	run.opts.Seed = 7
	c := runDropout(t, 2, run)
	for r := range a {
		for i := range a[r].Losses {
			if a[r].Losses[i] == c[r].Losses[i] {
				t.Fatalf("rank %d, call %d: Seed 0 and Seed 7 give the same loss %v", r, i, a[r].Losses[i])
			}
		}
	}
	if reflect.DeepEqual(a[0].Params, c[0].Params) {
		t.Fatal("Seed 0 and Seed 7 end with the same parameters")
	}
}

// TestCheckpointResumeDropout is TestCheckpointResume with dropout and
// no-sync micro-steps: the job resumed from rank 0's checkpoint draws the
// masks the job that never stopped drew, and ends with its bits. The
// masks are per-rank: with SameRandomAcrossRanks the job ends elsewhere.
func TestCheckpointResumeDropout(t *testing.T) {
	const size, half = 2, 4
	dir := t.TempDir()
	whole := runDropout(t, size, dropoutRun{to: 2 * half, rows: 8, noSync: true})
	first := runDropout(t, size, dropoutRun{to: half, rows: 8, noSync: true, save: dir})
	resumed := runDropout(t, size, dropoutRun{from: half, to: 2 * half, rows: 8, noSync: true, load: dir})
	for r := range size {
		checkBitwise(t, r, resumed[r].Params, whole[0].Params)
		if got, want := resumed[r].Losses, whole[r].Losses[len(first[r].Losses):]; !reflect.DeepEqual(got, want) {
			t.Fatalf("rank %d: the resumed job's losses are %v, the whole job's %v", r, got, want)
		}
	}
	same := runDropout(t, size, dropoutRun{to: 2 * half, rows: 8, noSync: true,
		opts: gomlxddp.Options{SameRandomAcrossRanks: true}})
	if reflect.DeepEqual(same[0].Params, whole[0].Params) {
		t.Fatal("per-rank and shared random streams end with the same parameters: the test checks nothing")
	}
}

// TestSameRandomOneRank: with SameRandomAcrossRanks, one rank trains the
// dropout model as GoMLX's own Trainer does: the same masks, so the same
// losses, bit for bit.
func TestSameRandomOneRank(t *testing.T) {
	const steps, rows = 4, 8
	c := newContext(seed)
	ref := train.NewTrainer(newBackend(t), c, dropoutMLP, losses.MeanSquaredError, newAdam(), nil, nil)
	var want []float64
	for s := range steps {
		x, y := batch(s, rows)
		m, err := ref.TrainStep(nil, []*tensors.Tensor{tensors.FromValue(x)}, []*tensors.Tensor{tensors.FromValue(y)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m[0].Value().(float64))
	}
	groups, err := local.New(1, local.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer groups[0].Close()
	got, err := dropoutRank(groups[0], dropoutRun{to: steps, rows: rows,
		opts: gomlxddp.Options{SameRandomAcrossRanks: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Losses, want) {
		t.Fatalf("losses %v, GoMLX's Trainer's %v", got.Losses, want)
	}
}
