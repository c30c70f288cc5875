package main

import (
	"context"
	"time"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"gorgonia.org/gorgonia"
)

// Note [engines]
//
// The training loop (train.go) is one loop for both engines. What differs
// is one micro-batch's forward and backward and where the gradients come
// from, which is stepEngine. Everything else works on the parameters as
// host tensors: the optimizer (package optim, the same torch-exact
// optimizers, schedules and clipping for both engines), checkpoints,
// --init/--save, held-out evaluation, the non-finite guard, DiLoCo,
// --zero, the summary and the timeline. The parameters live in
// model.Params' Gorgonia tensors for both: --engine gorgonia's graph
// reads them there, and --engine gomlx copies them into its program's
// inputs before each micro-batch (gomlxengine.go). So the engines differ
// only in how they compute gradients, which is what a comparison of them
// should measure.

// stepEngine is one rank's forward and backward, and the reducer it
// feeds.
type stepEngine interface {
	// micro feeds one micro-batch (rows of the data set's features, and
	// their labels), runs forward and backward, and hands the gradients
	// to the reducer: reduced when sync, added to the buckets otherwise
	// (no_sync). An error that errors.Is reducer.ErrNonFinite leaves a
	// complete iteration whose update the caller may skip.
	micro(ctx context.Context, x []float64, labels []int, m int, sync bool) (microOut, error)
	// reset releases what one iteration holds (Gorgonia's tape).
	reset()
	// ParamTensors views the parameters, in model.Params' order.
	ParamTensors() ([]pg.Tensor, error)
	// StepTensors are the parameters and their averaged gradients after a
	// synchronised micro, as optim's Step takes them.
	StepTensors() (params, grads []pg.Tensor, err error)
	// Reducer is the engine's reducer.
	Reducer() *reducer.Reducer
	// Close releases the reducer and the engine's programs.
	Close() error
}

// microOut is what one micro-batch gives the loop.
type microOut struct {
	loss    float64
	correct int
	tapeEnd time.Time // when backward ended, before waiting for the buckets
}

// gorgoniaEngine is --engine gorgonia: the model's graph on Gorgonia's
// tape machine, its gradients reported to the reducer from inside the
// tape by package ddp's hooks.
type gorgoniaEngine struct {
	*ddp.DDP
	net  *model.Net
	vm   gorgonia.VM
	spec model.Spec
}

func (e *gorgoniaEngine) micro(ctx context.Context, x []float64, labels []int, _ int, sync bool) (microOut, error) {
	if err := e.net.Feed(e.spec, x, labels); err != nil {
		return microOut{}, err
	}
	vm := &timedVM{VM: e.vm}
	var err error
	if sync {
		err = e.RunAll(ctx, vm)
	} else {
		err = e.RunAllNoSync(ctx, vm)
	}
	if vm.tapeEnd.IsZero() {
		vm.tapeEnd = time.Now()
	}
	loss := e.net.LossValue()
	return microOut{loss: loss, correct: e.net.Correct(labels), tapeEnd: vm.tapeEnd}, err
}

func (e *gorgoniaEngine) reset() { e.vm.Reset() }
