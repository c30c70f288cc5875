package gomlxddp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// Options configures a Trainer. The zero value gives DDP's defaults.
type Options struct {
	// Reducer configures the gradient reducer: bucket sizes, the comm
	// hook, CheckFinite, FindNonFiniteOrigin, CheckReplicasEvery, the
	// logger, the metrics registerer and the timeline. With
	// GradientAsBucketView each gradient is copied from GoMLX straight into
	// its bucket and the optimizer's graph reads the average from there:
	// one host copy per gradient less. FindUnusedParameters and
	// MixedPrecision are refused: see docs/gomlx.md.
	Reducer reducer.Options
	// BroadcastBuffers (DDP's broadcast_buffers): after every step, rank
	// 0's values of the non-trainable variables that the model's graph
	// changes (batch-normalisation statistics) are copied to every rank.
	// Off by default here, unlike torch, since most GoMLX models have no
	// such variables and it costs one broadcast per step when they do.
	BroadcastBuffers bool
	// Timeout bounds each collective call (the set-up broadcasts, one
	// step's reduction) when the caller's context has no deadline. Zero
	// means pg.DefaultTimeout.
	Timeout time.Duration
	// Seed is mixed, with the rank, into the random state each rank's
	// gradient graph draws from (dropout masks, ctx.RandomUniform), so
	// that every rank draws its own numbers whatever the seed: see Note
	// [per-rank random streams]. The streams are derived from rank 0's
	// initial random state too (GoMLX's mlctx.ParamInitialSeed, or a
	// checkpoint's), so they are reproducible when the initial values
	// are, and a resumed job draws what the job that never stopped drew.
	// Zero is a seed like any other; change it to draw other masks from
	// the same initial values.
	Seed int64
	// SameRandomAcrossRanks makes every rank draw the same random numbers,
	// from the random state rank 0 sends at set-up, as one process would
	// on its own: the same dropout masks on every rank's rows. For models
	// whose random choices must agree across replicas; off by default.
	SameRandomAcrossRanks bool
}

// Trainer trains a GoMLX model data-parallel over a goddp process group.
// One Trainer per rank; every rank calls TrainStep with its own shard of
// the batch, and all ranks hold the same variables after each step.
// A Trainer is not safe for concurrent use.
type Trainer struct {
	backend backends.Backend
	mctx    *mlctx.Context
	group   pg.ProcessGroup
	model   train.ModelFn
	loss    train.LossFn
	opt     train.OptimizeWithGradients
	opts    Options

	gradExec, applyExec *mlctx.Exec
	numInputs           int
	graphs              int  // gradient graphs built (one per input shape)
	loaded              bool // the context held variables, or a checkpoint to load them from, before the first step
	lossDType           dtypes.DType

	params  []*mlctx.Variable // trainable variables the loss reaches, in GoMLX's order
	buffers []*mlctx.Variable // non-trainable variables the gradient graph changes
	perStep []perStepFn       // what the model registered with train.AddPerStepUpdateGraphFn
	r       *reducer.Reducer
	grads   []pg.Tensor       // host copy of each parameter's gradient; the reducer writes the average back
	applyIn []*tensors.Tensor // the averaged gradients, as inputs of the optimizer's graph
	rng     *rngStream        // nil with Options.SameRandomAcrossRanks
	steps   int
	err     error // sticky: a failed step leaves the ranks out of step
}

// New returns a Trainer for the model in mctx. model and loss are
// GoMLX's train.ModelFn and train.LossFn (loss may be nil when the model
// adds its losses with train.AddLoss); opt must implement
// train.OptimizeWithGradients, as GoMLX's SGD, Adam, AdamW and Adamax
// do. New only checks its arguments: the variables are created, and rank
// 0's copied to every rank, by the first TrainStep (or Setup), which is
// collective.
func New(backend backends.Backend, mctx *mlctx.Context, group pg.ProcessGroup,
	model train.ModelFn, loss train.LossFn, opt optimizers.Interface, o Options) (*Trainer, error) {
	switch {
	case backend == nil || mctx == nil || group == nil || model == nil || opt == nil:
		return nil, fmt.Errorf("%w: gomlxddp.New needs a backend, a context, a process group, a model and an optimizer",
			pg.ErrInvalidArgument)
	case o.Reducer.FindUnusedParameters:
		return nil, errors.New("gomlxddp: Options.Reducer.FindUnusedParameters is not supported: GoMLX differentiates the " +
			"whole graph at once, so a parameter the loss does not reach is simply not a parameter here (it is left out of " +
			"the reducer)")
	case o.Reducer.MixedPrecision != nil:
		return nil, errors.New("gomlxddp: Options.Reducer.MixedPrecision is not supported yet; leave it nil")
	case o.Timeout < 0:
		return nil, fmt.Errorf("%w: gomlxddp: Options.Timeout is %v; want 0 (pg.DefaultTimeout) or more",
			pg.ErrInvalidArgument, o.Timeout)
	}
	withGrads, ok := opt.(train.OptimizeWithGradients)
	if !ok {
		return nil, fmt.Errorf("gomlxddp: optimizer %T does not implement train.OptimizeWithGradients, which DDP needs to "+
			"apply averaged gradients; use GoMLX's SGD or Adam family", opt)
	}
	if o.Timeout == 0 {
		o.Timeout = pg.DefaultTimeout
	}
	return &Trainer{backend: backend, mctx: mctx, group: group, model: model, loss: loss, opt: withGrads, opts: o}, nil
}

// Reducer returns the reducer, for inspection (buckets, copy counts); nil
// before the first step. Choose the comm hook with Options.Reducer.Hook.
func (t *Trainer) Reducer() *reducer.Reducer { return t.r }

// Params returns the trainable variables DDP reduces, in the reducer's
// parameter order; nil before the first step.
func (t *Trainer) Params() []*mlctx.Variable { return t.params }

// Steps is the number of optimizer steps taken.
func (t *Trainer) Steps() int { return t.steps }

// Setup creates the model's and the optimizer's variables (by building
// both graphs of a step for inputs' and labels' shapes, uncompiled),
// initialises them, checks that every rank holds the same ones, and
// copies every variable from rank 0 to every rank. It is collective.
// TrainStep calls it on first use; the graphs compile at the first step.
func (t *Trainer) Setup(ctx context.Context, inputs, labels []*tensors.Tensor) error {
	if t.err != nil {
		return t.err
	}
	if t.r != nil {
		return nil
	}
	ctx, cancel := t.bound(ctx)
	defer cancel()
	if err := t.setup(ctx, inputs, labels); err != nil {
		t.err = err
		return err
	}
	return nil
}

// TrainStep runs one synchronised step: forward and backward on this
// rank's inputs and labels, the gradients' reduction through the
// reducer's buckets and comm hook, then the optimizer's update with the
// averaged gradients. It returns this rank's loss. It is collective. After
// an error the Trainer is unusable: its ranks are out of step. The one
// exception: with Options.Reducer.CheckFinite (or FindNonFiniteOrigin), an
// error that errors.Is reducer.ErrNonFinite says that some averaged
// gradient holds a NaN or an infinity; it comes on every rank at the same
// step, the optimizer's update is skipped, and training may go on.
//
// After TrainStepNoSync calls, the optimizer receives the average over
// ranks of the sum of this step's and those steps' gradients, as after
// torch's no_sync.
func (t *Trainer) TrainStep(ctx context.Context, inputs, labels []*tensors.Tensor) (float64, error) {
	return t.run(ctx, inputs, labels, true)
}

// TrainStepNoSync is DDP's no_sync: forward and backward without
// communication and without an optimizer step; the gradients add up in
// the reducer's buckets until the next TrainStep reduces their sum. Every
// rank must make the same sequence of calls (the first call, which sets
// up, is collective).
func (t *Trainer) TrainStepNoSync(ctx context.Context, inputs, labels []*tensors.Tensor) (float64, error) {
	return t.run(ctx, inputs, labels, false)
}

func (t *Trainer) run(ctx context.Context, inputs, labels []*tensors.Tensor, sync bool) (float64, error) {
	if err := t.Setup(ctx, inputs, labels); err != nil {
		return 0, err
	}
	ctx, cancel := t.bound(ctx)
	defer cancel()
	loss, err := t.step(ctx, inputs, labels, sync)
	if errors.Is(err, reducer.ErrNonFinite) {
		return loss, err // a complete step, without its update: the Trainer goes on
	}
	if err != nil {
		t.err = err
		if t.r != nil {
			_ = t.r.Fail(err)
		}
		return 0, err
	}
	if sync {
		t.steps++
	}
	return loss, nil
}

// Close releases the compiled graphs and the reducer. It does not close
// the process group, the context or the backend.
func (t *Trainer) Close() error {
	for _, e := range []*mlctx.Exec{t.gradExec, t.applyExec} {
		if e != nil {
			e.Finalize()
		}
	}
	t.gradExec, t.applyExec = nil, nil
	finalizeAll(t.applyIn) // some are nil when the set-up failed half way
	t.applyIn = nil
	if t.err == nil {
		t.err = errors.New("gomlxddp: the Trainer is closed")
	}
	if t.r != nil {
		return t.r.Close()
	}
	return nil
}

// bound gives ctx the Trainer's timeout when it has no deadline.
func (t *Trainer) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, t.opts.Timeout)
}
