package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/reducer"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Note [--engine gomlx]
//
// --engine gomlx computes each micro-batch's forward and backward as one
// compiled GoMLX program on simplego, GoMLX's pure-Go backend, and does
// everything else as --engine gorgonia does (Note [engines]). The
// program is a pure function: its inputs are the parameters (in
// model.Params' order, so the same names, shapes and initial values for
// the same --seed), the batch, its labels and, with --dropout, a random
// state; its outputs are the loss, the logits and the gradient of every
// parameter. No GoMLX variable holds the model: the parameters stay in
// model.Params, where the optimizer (package optim) steps them, a
// checkpoint captures them and the evaluator reads them, and they are
// copied into the program's inputs before each micro-batch.
//
// The gradients are written out by hand (gomlxnet.go, Note [the dense
// layer's gradient]) rather than by GoMLX's autodiff, for speed: GoMLX
// v0.26.0 differentiates a matrix product by broadcasting and reducing
// elementwise, which simplego runs as written (docs/gomlx.md, "where the
// time goes").

// gomlxEngine is --engine gomlx's stepEngine.
type gomlxEngine struct {
	backend backends.Backend
	exec    *graph.Exec   // the micro-batch's program; the forward program with layers
	layers  []*graph.Exec // --gomlx-programs per-layer: each layer's backward (Note [backward in several programs])
	lay     forwardLayout
	r       *reducer.Reducer
	net     gomlxNet
	values  []pg.Tensor       // the parameters' host values: model.Params' tensors
	grads   []pg.Tensor       // this rank's gradients, in the compute dtype; the reducer writes the averages back
	in      []*tensors.Tensor // the parameters as the program's inputs, refilled before each micro-batch
	view    bool              // --gradient-as-bucket-view: the gradients go straight into the buckets
	every   int               // --check-replicas
	syncs   int
	seed    int64 // --seed, for the dropout masks' random state
	rank    int
}

// newGoMLXEngine builds the reducer, copies rank 0's parameters to every
// rank, as ddp.Wrap does, and compiles nothing yet: the program compiles
// at the first micro-batch of each batch size.
func (t *trainer) newGoMLXEngine(ctx context.Context, s *session, opts reducer.Options) (*gomlxEngine, error) {
	net, err := newGoMLXNet(s.spec, t.c)
	if err != nil {
		return nil, err
	}
	p := s.params
	e := &gomlxEngine{net: net, view: opts.GradientAsBucketView, every: opts.CheckReplicasEvery, seed: t.c.seed,
		rank: t.g.Rank()}
	descs := make([]reducer.Param, p.Len())
	for i, n := range p.Nodes {
		v, err := gtensor.TensorOf(n.Value())
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %w", p.Name(i), err)
		}
		descs[i] = reducer.Param{Name: p.Name(i), Shape: p.Shape(i), Dtype: v.Dtype}
		e.values = append(e.values, v)
		e.grads = append(e.grads, pg.NewTensor(pgDtypeOf(net.compute), v.Len()))
		e.in = append(e.in, tensors.FromShape(net.paramShape(p.Shape(i))))
	}
	opts.MixedPrecision = net.mixed()
	if opts.MixedPrecision != nil {
		opts.Hook = nil // MixedPrecision brings its own (Note [mixed precision in ddp-train])
	}
	if e.r, err = reducer.New(ctx, t.g, descs, opts); err != nil {
		return nil, err
	}
	if err := e.r.BroadcastParams(ctx, e.values); err != nil {
		return nil, errors.Join(err, e.r.Close())
	}
	if e.backend, err = simplego.New("ops_sequential"); err != nil { // docs/gomlx.md: its parallel executor races
		return nil, errors.Join(err, e.r.Close())
	}
	if t.c.gomlxPrograms == "per-layer" {
		err = e.compileSplit()
	} else {
		e.exec, err = graph.NewExec(e.backend, net.program)
	}
	if err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return e, nil
}

func (e *gomlxEngine) micro(ctx context.Context, x []float64, labels []int, m int, sync bool) (microOut, error) {
	if sync && e.every > 0 && e.syncs > 0 && e.syncs%e.every == 0 {
		if err := e.r.VerifyReplicas(ctx, e.values); err != nil {
			return microOut{}, err
		}
	}
	if sync {
		e.syncs++
	}
	for i, v := range e.values {
		if err := copyIn(e.in[i], v); err != nil {
			return microOut{}, fmt.Errorf("parameter %d into GoMLX: %w", i, err)
		}
	}
	args := make([]any, 0, len(e.in)+3)
	for _, in := range e.in {
		args = append(args, in)
	}
	args = append(args, e.net.batch(x, len(labels)), e.net.labels(labels))
	if e.net.dropout > 0 {
		args = append(args, e.randomState(m))
	}
	if err := e.r.Prepare(ctx, reducer.Iteration{Sync: sync}); err != nil {
		return microOut{}, err
	}
	if e.layers != nil {
		return e.runSplit(ctx, args, labels)
	}
	e.r.MarkBackwardStart() // the program is forward and backward at once: --timeline shows it all as backward
	var outs []*tensors.Tensor
	err := catch(func() error {
		var err error
		outs, err = e.exec.Exec(args...)
		return err
	})
	if err != nil {
		return microOut{}, e.r.Fail(fmt.Errorf("GoMLX forward and backward: %w", err))
	}
	defer finalizeAll(outs)
	out := microOut{tapeEnd: time.Now()}
	if out.loss, err = scalarOf(outs[0]); err == nil {
		out.correct, err = correctOf(outs[1], labels)
	}
	if err != nil {
		return out, e.r.Fail(err)
	}
	return out, e.reduce(ctx, outs[2:])
}

// reduce hands the program's gradients to the reducer, last parameter
// first (the order a backward pass produces them in), and waits for the
// averages.
func (e *gomlxEngine) reduce(ctx context.Context, grads []*tensors.Tensor) error {
	add := e.r.Accumulating()
	for i := len(grads) - 1; i >= 0; i-- {
		if err := e.ready(i, grads[i], add); err != nil {
			return err
		}
	}
	e.r.MarkBackwardEnd()
	return e.r.Finalize(ctx)
}

// ready copies parameter i's gradient out of GoMLX, into its bucket with
// --gradient-as-bucket-view (added to it while the reducer accumulates),
// and marks it ready.
func (e *gomlxEngine) ready(i int, grad *tensors.Tensor, add bool) error {
	dst := e.grads[i]
	if e.view { // Note [gradient as bucket view]: straight into the bucket
		dst = e.r.GradientBuffer(i)
	}
	var err error
	if e.view && add {
		err = addOut(dst, grad)
	} else {
		err = copyOut(dst, grad)
	}
	if err != nil {
		return e.r.Fail(fmt.Errorf("the gradient of parameter %d: %w", i, err))
	}
	return e.r.MarkReady(i, dst)
}

// randomState is micro-batch m's random state on this rank:
// dropoutState.
func (e *gomlxEngine) randomState(m int) *tensors.Tensor { return dropoutState(e.seed, e.rank, m) }

// dropoutState is the random state of rank's micro-batch m: a function of
// --seed, the rank and m only, so that ranks draw different dropout masks,
// and a run, a resumed run and a replay draw the same ones (Note [per-rank
// dropout]).
func dropoutState(seed int64, rank, m int) *tensors.Tensor {
	h := fnv.New64a()
	fmt.Fprintf(h, "goddp dropout seed=%d rank=%d micro=%d", seed, rank, m)
	st, err := graph.RNGStateFromSeed(int64(h.Sum64()))
	if err != nil { // RNGStateFromSeed fails on nothing an int64 can hold
		panic(err)
	}
	return st
}

func (e *gomlxEngine) reset() {}

func (e *gomlxEngine) ParamTensors() ([]pg.Tensor, error) { return e.values, nil }

func (e *gomlxEngine) StepTensors() (params, grads []pg.Tensor, err error) {
	grads = make([]pg.Tensor, len(e.values))
	for i := range grads {
		grads[i] = e.r.Gradient(i) // the average, in the parameter's dtype
	}
	return e.values, grads, nil
}

func (e *gomlxEngine) Reducer() *reducer.Reducer { return e.r }

func (e *gomlxEngine) Close() error {
	for _, x := range append([]*graph.Exec{e.exec}, e.layers...) {
		if x != nil {
			x.Finalize()
		}
	}
	e.backend.Finalize()
	for _, in := range e.in {
		in.FinalizeAll()
	}
	return e.r.Close()
}

// copyOut copies a GoMLX tensor's bytes into a host tensor of the same
// size.
func copyOut(dst pg.Tensor, src *tensors.Tensor) error {
	var n int
	err := src.ConstBytes(func(data []byte) {
		if n = len(data); n == len(dst.Data) {
			copy(dst.Data, data)
		}
	})
	if err == nil && n != len(dst.Data) {
		err = fmt.Errorf("%d bytes where %d were expected", n, len(dst.Data))
	}
	return err
}

// addOut adds a GoMLX tensor's values into a host tensor of the same
// size and dtype (no_sync into the buckets).
func addOut(dst pg.Tensor, src *tensors.Tensor) error {
	var err error
	add := func(data []byte) { err = backend.Add(dst, pg.Tensor{Dtype: dst.Dtype, Data: data}) }
	if e := src.ConstBytes(add); e != nil {
		return e
	}
	return err
}

// copyIn copies a host tensor's bytes into a GoMLX tensor of the same size
// and dtype.
func copyIn(dst *tensors.Tensor, src pg.Tensor) error {
	var n int
	err := dst.MutableBytes(func(data []byte) {
		if n = len(data); n == len(src.Data) {
			copy(data, src.Data)
		}
	})
	if err == nil && n != len(src.Data) {
		err = fmt.Errorf("%d bytes where %d were expected", n, len(src.Data))
	}
	return err
}

// scalarOf reads a scalar float tensor (the loss) as a float64.
func scalarOf(t *tensors.Tensor) (float64, error) {
	var v float64
	err := t.ConstFlatData(func(flat any) {
		switch f := flat.(type) {
		case []float32:
			v = float64(f[0])
		case []float64:
			v = f[0]
		}
	})
	return v, err
}

// correctOf counts the rows whose largest logit (the first of equals) is
// their label's, as model.Net.Correct does.
func correctOf(logits *tensors.Tensor, labels []int) (int, error) {
	var rows []float64
	err := logits.ConstFlatData(func(flat any) {
		switch f := flat.(type) {
		case []float32:
			rows = make([]float64, len(f))
			for i, v := range f {
				rows[i] = float64(v)
			}
		case []float64:
			rows = f
		}
	})
	return model.CorrectRows(rows, labels, logits.Shape().Dimensions[1]), err
}

// catch turns a GoMLX panic (its way of reporting a bad graph) into an
// error.
func catch(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	return fn()
}

func finalizeAll(ts []*tensors.Tensor) {
	for _, t := range ts {
		t.FinalizeAll()
	}
}
