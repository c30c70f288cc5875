package gomlxddp

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
)

// Note [two graphs per step]
//
// GoMLX's Trainer builds one graph per step: model, loss, gradients and
// the optimizer's update, compiled and run as one program. DDP needs the
// gradients in between, on the host, so this package splits the step in
// two graphs: gradGraph (model, loss, gradients; its outputs are the loss
// and each gradient) and applyGraph (the optimizer's
// UpdateGraphWithGradients fed with the averaged gradients, as GoMLX's own
// gradient accumulation does). Variables the graphs change are written
// back to the context by GoMLX's context.Exec, as usual.
//
// applyGraph must see the same trainable variables, in the same order,
// as gradGraph: GoMLX's optimizers pair gradients with the variables that
// are trainable and used by the graph, in the context's order. So
// applyGraph first reads exactly the variables gradGraph recorded.

// gradGraph is the first graph of a step: its outputs are the loss, then
// the gradient of each trainable variable the loss reaches.
func (t *Trainer) gradGraph(ctx *mlctx.Context, inputsAndLabels []*graph.Node) []*graph.Node {
	g := inputsAndLabels[0].Graph()
	if t.graphs > 0 || t.loaded {
		// The variables exist: from the first graph, or from a checkpoint
		// loaded before the first step.
		ctx = ctx.Checked(false)
	}
	ctx.SetTraining(g, true)
	inputs, labels := inputsAndLabels[:t.numInputs], inputsAndLabels[t.numInputs:]
	predictions := t.model(ctx, nil, inputs)
	if t.loss != nil {
		base := t.loss(labels, predictions)
		if !base.Shape().IsScalar() {
			base = graph.ReduceAllMean(base)
		}
		train.SetLossNoRegularization(ctx, base)
		train.AddLoss(ctx, base)
	}
	lossAny, found := ctx.InAbsPath(train.TrainerAbsoluteScope).GetGraphParam(g, train.TrainerLossGraphParamKey)
	loss, _ := lossAny.(*graph.Node)
	if !found || loss == nil {
		panic(fmt.Errorf("gomlxddp: the model produced no loss: pass a loss function, or add losses with train.AddLoss"))
	}
	grads := ctx.BuildTrainableVariablesGradientsGraph(loss)
	t.perStep = perStepFns(ctx, g)
	params, buffers := t.usedVariables(ctx, g)
	if t.graphs > 0 && !sameVariables(params, t.params) {
		panic(fmt.Errorf("gomlxddp: the model's graph for these input shapes reaches other trainable variables than the " +
			"first graph's; DDP needs the same parameters at every step"))
	}
	t.params, t.buffers, t.lossDType = params, buffers, loss.DType()
	t.graphs++
	return append([]*graph.Node{loss}, grads...)
}

// usedVariables lists, in the context's order, the trainable variables g
// uses (those BuildTrainableVariablesGradientsGraph differentiates) and
// the non-trainable ones g changes.
func (t *Trainer) usedVariables(ctx *mlctx.Context, g *graph.Graph) (params, buffers []*mlctx.Variable) {
	for v := range ctx.IterVariables() {
		switch {
		case v.Trainable && v.InUseByGraph(g):
			params = append(params, v)
		case !v.Trainable && v.ChangedInGraph(g):
			buffers = append(buffers, v)
		}
	}
	return params, buffers
}

func sameVariables(a, b []*mlctx.Variable) bool {
	return slices.Equal(a, b)
}

// applyGraph is the second graph of a step: the optimizer's update of
// t.params with the averaged gradients, then the per-step update
// functions the model registered (train.AddPerStepUpdateGraphFn). Its output is a constant zero (GoMLX
// returns the changed variables besides).
func (t *Trainer) applyGraph(ctx *mlctx.Context, grads []*graph.Node) *graph.Node {
	g := grads[0].Graph()
	ctx = ctx.Checked(false)
	for _, v := range t.params {
		v.ValueGraph(g) // marks v as used by g: see Note [two graphs per step]
	}
	t.opt.UpdateGraphWithGradients(ctx, grads, t.lossDType)
	for _, f := range t.perStep { // after the update, as GoMLX's Trainer runs them
		f.fn(ctx.InAbsPath(f.scope), g)
	}
	train.ExecPerStepUpdateGraphFn(ctx, g) // any registered on this graph
	return graph.Const(g, int32(0))
}

// perStepFn is a function the model registered with
// train.AddPerStepUpdateGraphFn, and the scope it registered it in.
type perStepFn struct {
	scope string
	fn    train.ContextGraphFn
}

// perStepFns lists the per-step update functions the model registered on
// g, the gradient graph: they belong after the optimizer's update, so
// applyGraph runs them.
func perStepFns(ctx *mlctx.Context, g *graph.Graph) []perStepFn {
	var fns []perStepFn
	ctx.EnumerateGraphParams(g, func(scope, key string, value any) {
		if fn, ok := value.(train.ContextGraphFn); ok && key == train.TrainerPerStepUpdateGraphFnParamKey {
			fns = append(fns, perStepFn{scope, fn})
		}
	})
	return fns
}
