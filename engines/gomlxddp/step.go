package gomlxddp

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// setup is Setup's work: see Note [two graphs per step] and
// Note [rank 0's variables].
func (t *Trainer) setup(ctx context.Context, inputs, labels []*tensors.Tensor) error {
	if len(inputs) == 0 {
		return fmt.Errorf("%w: gomlxddp: a step needs at least one input tensor", pg.ErrInvalidArgument)
	}
	t.numInputs = len(inputs)
	t.loaded = t.mctx.NumVariables() > 0 || t.mctx.Loader() != nil
	untrainRNGState(t.mctx)
	if err := catch(func() error { return t.declare(inputs, labels) }); err != nil {
		return fmt.Errorf("gomlxddp: building the model's graph: %w", err)
	}
	if len(t.params) == 0 {
		return errors.New("gomlxddp: the loss reaches no trainable variable: there is nothing to train")
	}
	descs := make([]reducer.Param, len(t.params))
	t.grads = make([]pg.Tensor, len(t.params))
	t.applyIn = make([]*tensors.Tensor, len(t.params))
	for i, v := range t.params {
		dt, err := pgDtype(v.DType())
		if err != nil {
			return fmt.Errorf("gomlxddp: variable %s: %w", v.ScopeAndName(), err)
		}
		descs[i] = reducer.Param{Name: v.ScopeAndName(), Shape: v.Shape().Dimensions, Dtype: dt}
		t.grads[i] = pg.NewTensor(dt, v.Shape().Size())
		t.applyIn[i] = tensors.FromShape(v.Shape())
	}
	err := catch(func() error {
		var err error
		if t.gradExec, err = mlctx.NewExecAny(t.backend, t.mctx, t.gradGraph); err != nil {
			return err
		}
		if t.applyExec, err = mlctx.NewExecAny(t.backend, t.mctx, t.applyGraph); err != nil {
			return err
		}
		if err := t.mctx.InitializeVariables(t.backend, nil); err != nil {
			return err
		}
		return ensureRNGState(t.mctx)
	})
	if err != nil {
		return fmt.Errorf("gomlxddp: initialising the variables: %w", err)
	}
	// reducer.New checks that every rank holds the same parameters.
	if t.r, err = reducer.New(ctx, t.group, descs, t.opts.Reducer); err != nil {
		return err
	}
	if err := broadcastVariables(ctx, t.group, variables(t.mctx)); err != nil {
		return err
	}
	t.rng = newRNGStream(t.mctx, t.opts, t.group.Rank())
	return nil
}

// declare creates the model's and the optimizer's variables by building
// both graphs of a step once, on a graph that is never compiled: GoMLX's
// Exec.PreCompile would hand the variables a graph changes to the
// compiled program (it donates their buffers) without running it, so
// they would lose their values. The Execs build their own graphs at the
// first step.
func (t *Trainer) declare(inputs, labels []*tensors.Tensor) error {
	g := graph.NewGraph(t.backend, "gomlxddp.declare")
	defer g.Finalize()
	var nodes []*graph.Node
	for i, x := range append(slices.Clip(inputs), labels...) {
		nodes = append(nodes, graph.Parameter(g, fmt.Sprintf("arg%d", i), x.Shape()))
	}
	grads := t.gradGraph(t.mctx, nodes)
	if len(t.params) > 0 {
		t.applyGraph(t.mctx, grads[1:])
	}
	return nil
}

// step is one TrainStep (sync) or TrainStepNoSync after Setup.
func (t *Trainer) step(ctx context.Context, inputs, labels []*tensors.Tensor, sync bool) (float64, error) {
	if len(inputs) != t.numInputs {
		return 0, fmt.Errorf("%w: gomlxddp: %d inputs, but the first step had %d", pg.ErrInvalidArgument, len(inputs),
			t.numInputs)
	}
	if every := t.opts.Reducer.CheckReplicasEvery; sync && every > 0 && t.steps > 0 && t.steps%every == 0 {
		if err := t.VerifyReplicas(ctx); err != nil {
			return 0, err
		}
	}
	outs, err := t.forwardBackward(inputs, labels)
	if err != nil {
		return 0, err
	}
	defer finalizeAll(outs)
	if len(outs) != 1+len(t.params) {
		return 0, fmt.Errorf("gomlxddp: the gradient graph returned %d outputs for %d parameters", len(outs), len(t.params))
	}
	if err := t.reduce(ctx, outs[1:], sync); err != nil {
		if errors.Is(err, reducer.ErrNonFinite) { // Options.Reducer.CheckFinite: skip the update
			loss, _ := scalar(outs[0])
			return loss, err
		}
		return 0, err
	}
	if !sync {
		return scalar(outs[0])
	}
	if err := t.apply(); err != nil {
		return 0, err
	}
	if t.opts.BroadcastBuffers && len(t.buffers) > 0 {
		if err := broadcastVariables(ctx, t.group, t.buffers); err != nil {
			return 0, err
		}
	}
	return scalar(outs[0])
}

// forwardBackward runs the gradient graph on this rank's own random
// state (Note [per-rank random streams]).
func (t *Trainer) forwardBackward(inputs, labels []*tensors.Tensor) ([]*tensors.Tensor, error) {
	next, err := t.rng.begin()
	if err != nil {
		return nil, err
	}
	var outs []*tensors.Tensor
	err = catch(func() error {
		var err error
		outs, err = t.gradExec.Exec(args(inputs, labels)...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("gomlxddp: forward and backward: %w", err)
	}
	if err := t.rng.end(next); err != nil {
		finalizeAll(outs)
		return nil, err
	}
	return outs, nil
}

// reduce feeds the gradients to the reducer, last parameter first (the
// order backward would produce them in). With sync it waits for the
// averages, which the reducer writes back into t.grads; without, the
// reducer adds them to its buckets for the next synchronised step.
func (t *Trainer) reduce(ctx context.Context, grads []*tensors.Tensor, sync bool) error {
	if err := t.r.Prepare(ctx, reducer.Iteration{Sync: sync}); err != nil {
		return err
	}
	t.r.MarkBackwardStart()
	view, add := t.opts.Reducer.GradientAsBucketView, t.r.Accumulating()
	for i := len(grads) - 1; i >= 0; i-- {
		dst := t.grads[i]
		if view { // Note [gradient as bucket view]: straight into the bucket
			dst = t.r.GradientBuffer(i)
		}
		var err error
		if view && add {
			err = addOut(dst, grads[i])
		} else {
			err = copyOut(dst, grads[i])
		}
		if err != nil {
			return t.r.Fail(fmt.Errorf("gomlxddp: gradient of %s: %w", t.params[i].ScopeAndName(), err))
		}
		if err := t.r.MarkReady(i, dst); err != nil {
			return err
		}
	}
	t.r.MarkBackwardEnd()
	return t.r.Finalize(ctx)
}

// apply runs the optimizer's graph on the averaged gradients.
func (t *Trainer) apply() error {
	for i, in := range t.applyIn {
		avg := t.grads[i]
		if t.opts.Reducer.GradientAsBucketView {
			avg = t.r.Gradient(i) // the average, in its bucket
		}
		if err := copyIn(in, avg); err != nil {
			return fmt.Errorf("gomlxddp: averaged gradient of %s: %w", t.params[i].ScopeAndName(), err)
		}
	}
	return catch(func() error {
		outs, err := t.applyExec.Exec(anys(t.applyIn)...)
		finalizeAll(outs)
		if err != nil {
			return fmt.Errorf("gomlxddp: optimizer step: %w", err)
		}
		return nil
	})
}

// VerifyReplicas checks that every rank holds the same trainable
// variables, bit for bit (reducer.VerifyReplicas: a digest of each,
// compared with one allreduce). It is collective.
func (t *Trainer) VerifyReplicas(ctx context.Context) error {
	if t.r == nil {
		return errors.New("gomlxddp: VerifyReplicas before the first step")
	}
	ctx, cancel := t.bound(ctx)
	defer cancel()
	values := make([]pg.Tensor, len(t.params))
	for i, v := range t.params {
		val, err := v.Value()
		if err != nil {
			return fmt.Errorf("gomlxddp: variable %s: %w", v.ScopeAndName(), err)
		}
		values[i] = pg.NewTensor(t.grads[i].Dtype, v.Shape().Size())
		if err := copyOut(values[i], val); err != nil {
			return fmt.Errorf("gomlxddp: variable %s: %w", v.ScopeAndName(), err)
		}
	}
	return t.r.VerifyReplicas(ctx, values)
}

// pgDtype is the process groups' name for a GoMLX float dtype.
func pgDtype(d dtypes.DType) (pg.Dtype, error) {
	switch d {
	case dtypes.Float32:
		return pg.Float32, nil
	case dtypes.Float64:
		return pg.Float64, nil
	}
	return 0, fmt.Errorf("%w: trainable dtype %s; the reducer takes float32 and float64 parameters", pg.ErrInvalidArgument,
		d)
}
