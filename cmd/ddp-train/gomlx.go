package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/goddp/ddp/engines/gomlxddp"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"github.com/goddp/ddp/sampler"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
	"go.uber.org/zap"
)

// Note [--engine gomlx]
//
// --engine gomlx trains the same MLP (model.NewParams: the same names,
// shapes and initial values for the same --seed) on the same data, in
// the same order (sampler, micro-batch m of step s is m + s·grad-accum),
// with GoMLX on its pure-Go simplego backend, through engines/gomlxddp.
// Its "train" lines carry the same loss (the mean over ranks and the
// window's steps), so a run can be compared with --engine gorgonia line
// by line. What the Gorgonia loop adds (checkpoints, the non-finite
// guard's naming of the culprit, the progress bar, summaries, timelines,
// the training metrics) is not there yet: the flags for them are refused (gomlxUnsupported).

// gomlxUnsupported are the flags --engine gomlx refuses, for now.
func gomlxUnsupported() []string {
	return []string{
		"init", "save", "checkpoint", "checkpoint-every", "checkpoint-keep", "resume", "resume-allow-changes",
		"find-unused-parameters", "static-graph", "find-nonfinite-origin",
		"summary", "timeline",
		"eval-data", "eval-labels", "eval-every", // held-out evaluation: Note [held-out evaluation] (eval.go)
		"momentum", "dampening", "nesterov", "weight-decay", "betas", "eps", // optflags.go
		"lr-schedule", "warmup-steps", "warmup-start-factor", "min-lr", "lr-step-size", "lr-gamma",
		"clip-grad-norm", "clip-grad-value", "zero", "zero-overlap", "zero-reduce-to-owners",
		"diloco-sync-every", "outer-lr", "outer-momentum", "diloco-fragments", "diloco-delay", "diloco-alpha",
		"diloco-quantize",
	}
}

// validateEngine checks --engine and what --engine gomlx can run.
func (c config) validateEngine() error {
	switch c.engine {
	case "gorgonia":
		return nil
	case "gomlx":
	default:
		return usagef("--engine %q: want gorgonia or gomlx", c.engine)
	}
	for _, name := range c.setFlags {
		if slices.Contains(gomlxUnsupported(), name) {
			return usagef("--%s is not supported with --engine gomlx yet (docs/gomlx.md)", name)
		}
	}
	switch {
	case c.model != "mlp":
		return usagef("--engine gomlx trains --model mlp only")
	case c.optimizer != "sgd" && c.optimizer != "adam":
		return usagef("--engine gomlx: --optimizer %q: want sgd or adam (GoMLX's)", c.optimizer)
	case c.backend == "nccl":
		return usagef("--engine gomlx runs on the CPU (simplego): use --backend tcp, local or mpi")
	}
	return nil
}

// train runs this rank's training with the engine --engine names.
func (t *trainer) train(ctx context.Context) error {
	if t.c.engine == "gomlx" {
		return t.runGoMLX(ctx)
	}
	return t.run(ctx)
}

// runGoMLX is one rank of --engine gomlx: Note [--engine gomlx].
func (t *trainer) runGoMLX(ctx context.Context) error {
	spec := specFor(t.c, t.ds.Info())
	t.buildMu.Lock()
	p, err := model.NewParams(spec, uint64(t.c.seed))
	t.buildMu.Unlock()
	if err != nil {
		return err
	}
	backend, err := simplego.New("ops_sequential") // see docs/gomlx.md: simplego's parallel executor races in v0.26.0
	if err != nil {
		return err
	}
	defer backend.Finalize()
	hook, err := hookByName(t.c)
	if err != nil {
		return usageError{err}
	}
	opts := gomlxddp.Options{Timeout: t.c.timeout, Reducer: reducer.Options{
		BucketCapBytes:       int(t.c.bucketCapMB * (1 << 20)),
		FirstBucketBytes:     int(t.c.firstBucketMB * (1 << 20)),
		CheckFinite:          true, // --on-nonfinite, as the Gorgonia loop: Note [non-finite guard]
		CheckReplicasEvery:   t.c.checkReplicas,
		GradientAsBucketView: t.c.bucketView,
		Hook:                 hook,
		Logger:               t.log,
		Registerer:           t.reg,
	}}
	tr, err := gomlxddp.New(backend, mlctx.New(), t.g, gomlxMLP(spec, p), gomlxLoss(t.c.gradAccum), gomlxOptimizer(t.c),
		opts)
	if err != nil {
		return err
	}
	defer tr.Close()
	return t.gomlxLoop(ctx, tr, spec, p)
}

// gomlxLoop runs the steps and logs rank 0's "train" lines.
func (t *trainer) gomlxLoop(ctx context.Context, tr *gomlxddp.Trainer, spec model.Spec, p *model.Params) error {
	smp, err := sampler.New(t.ds.N, t.g.Size(), t.g.Rank(), t.c.shuffle, t.c.seed)
	if err != nil {
		return err
	}
	feed := gomlxFeeder{feeder: newFeeder(t.ds, smp, t.c.batchSize), dtype: spec.Dtype.String()}
	total := t.c.steps
	if total == 0 {
		total = (t.c.epochs*feed.perEp + t.c.gradAccum - 1) / t.c.gradAccum
	}
	var window []float64 // this rank's step losses since the last line
	began := time.Now()
	for step := range total {
		loss := 0.0
		for micro := range t.c.gradAccum {
			x, y := feed.load(step*t.c.gradAccum + micro)
			run := tr.TrainStep
			if micro < t.c.gradAccum-1 {
				run = tr.TrainStepNoSync
			}
			l, err := run(ctx, []*tensors.Tensor{x}, []*tensors.Tensor{y})
			if errors.Is(err, reducer.ErrNonFinite) && t.c.onNonFinite == "skip" {
				if t.g.Rank() == 0 {
					t.log.Warn("skipping the update: the gradients are not finite (--on-nonfinite skip)", zap.Int("step", step+1),
						zap.Error(err))
				}
				err = nil // every rank skipped the update; the Trainer goes on
			}
			if err != nil {
				return fmt.Errorf("step %d: %w", step+1, err)
			}
			loss += l // already divided by --grad-accum: gomlxLoss
		}
		window = append(window, loss)
		if (step+1)%t.c.logEvery == 0 || step+1 == total {
			if err := t.gomlxLine(ctx, step+1, total, window); err != nil {
				return err
			}
			window = window[:0]
		}
	}
	if err := tr.VerifyReplicas(ctx); err != nil {
		return err
	}
	d, err := gomlxDigest(tr, p)
	if err != nil {
		return err
	}
	t.log.Info("done", zap.Int("rank", t.g.Rank()), zap.Int("steps", total), zap.String("engine", "gomlx"),
		zap.Duration("took", time.Since(began)), zap.String("param_digest", d))
	return nil
}

// gomlxDigest is digest for the GoMLX variables: a hash of every
// parameter's bytes, in p's order, so equal digests mean bitwise equal
// replicas (and, with --dtype float64, the Gorgonia engine's digest
// of the same bits).
func gomlxDigest(tr *gomlxddp.Trainer, p *model.Params) (string, error) {
	byName := map[string]*mlctx.Variable{}
	for _, v := range tr.Params() {
		byName[v.Name()] = v
	}
	h := sha256.New()
	for i := range p.Len() {
		v := byName[p.Name(i)]
		if v == nil {
			return "", fmt.Errorf("no GoMLX variable %s", p.Name(i))
		}
		val, err := v.Value()
		if err == nil {
			err = val.ConstBytes(func(data []byte) { h.Write(data) })
		}
		if err != nil {
			return "", fmt.Errorf("variable %s: %w", p.Name(i), err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// gomlxLine logs the window's mean loss over ranks and steps, as the
// Gorgonia loop's "train" line does.
func (t *trainer) gomlxLine(ctx context.Context, step, total int, window []float64) error {
	v := []float64{0, float64(len(window))}
	for _, l := range window {
		v[0] += l
	}
	if err := t.g.AllReduce(ctx, pg.Float64s(v), pg.Op(pg.Sum)).Wait(ctx); err != nil {
		return fmt.Errorf("averaging the loss: %w", err)
	}
	if t.g.Rank() == 0 {
		t.log.Info("train", zap.Int("step", step), zap.Int("steps", total), zap.Float64("loss", v[0]/v[1]),
			zap.String("engine", "gomlx"))
	}
	return nil
}

// gomlxFeeder is the Gorgonia loop's feeder, giving GoMLX tensors.
type gomlxFeeder struct {
	*feeder
	dtype string
}

// load returns micro-batch m's features and labels.
func (f gomlxFeeder) load(m int) (*tensors.Tensor, *tensors.Tensor) {
	x, y := f.gather(m)
	labels := make([]int32, len(y))
	for i, c := range y {
		labels[i] = int32(c)
	}
	lt := tensors.FromFlatDataAndDimensions(labels, len(y), 1)
	if f.dtype == "float32" {
		return tensors.FromFlatDataAndDimensions(toFloat32(x), len(y), f.ds.D), lt
	}
	return tensors.FromFlatDataAndDimensions(slices.Clone(x), len(y), f.ds.D), lt
}

func toFloat32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// gomlxLoss is the mean softmax cross-entropy, divided by the
// micro-batches per step: the optimizer then gets the mean of their
// gradients, as the Gorgonia loop gives it (it divides the sum by k).
func gomlxLoss(k int) func(labels, logits []*graph.Node) *graph.Node {
	return func(labels, logits []*graph.Node) *graph.Node {
		loss := losses.SparseCategoricalCrossEntropyLogits(labels, logits)
		if k > 1 {
			loss = graph.MulScalar(loss, 1/float64(k))
		}
		return loss
	}
}

// gomlxOptimizer is --optimizer in GoMLX: plain SGD (no decay), or Adam
// with torch's defaults.
func gomlxOptimizer(c config) optimizers.Interface {
	if c.optimizer == "adam" {
		return optimizers.Adam().LearningRate(c.lr).Betas(0.9, 0.999).Epsilon(1e-8).Done()
	}
	return optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(c.lr).Done()
}

// gomlxMLP is model.Spec's MLP in GoMLX: variables named as p's, holding
// p's initial values; x·W + b per layer, the activation between layers.
func gomlxMLP(spec model.Spec, p *model.Params) func(*mlctx.Context, any, []*graph.Node) []*graph.Node {
	return func(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
		h := inputs[0]
		g := h.Graph()
		for l := 0; 2*l < p.Len(); l++ {
			w, b := gomlxVariable(ctx, p, 2*l, spec.Dtype.String()), gomlxVariable(ctx, p, 2*l+1, spec.Dtype.String())
			h = graph.Add(graph.Dot(h, w.ValueGraph(g)), graph.ExpandAxes(b.ValueGraph(g), 0))
			if 2*l+2 < p.Len() {
				h = activate(h, spec.Activation)
			}
		}
		return []*graph.Node{h}
	}
}

func activate(x *graph.Node, name string) *graph.Node {
	if strings.EqualFold(name, "tanh") {
		return graph.Tanh(x)
	}
	return graph.Max(x, graph.ZerosLike(x)) // relu
}

func gomlxVariable(ctx *mlctx.Context, p *model.Params, i int, dtype string) *mlctx.Variable {
	var t *tensors.Tensor
	if dtype == "float32" {
		t = tensors.FromFlatDataAndDimensions(toFloat32(p.Value(i)), p.Shape(i)...)
	} else {
		t = tensors.FromFlatDataAndDimensions(slices.Clone(p.Value(i)), p.Shape(i)...)
	}
	return ctx.VariableWithValue(p.Name(i), t)
}
