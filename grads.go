package ddp

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"go.uber.org/zap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Note [a gradient of its own]
//
// The reducer writes each parameter's averaged gradient back into the
// memory its hook handed over, so every parameter needs memory of its
// own. Gorgonia does not promise that: it hash-conses its graph, so with
// logits = fc2(h) + fc3(h), two heads of one shape on one input, the
// gradients of fc2's and fc3's weights (hᵀ·dz) are one node, and both
// hooks pass on its one Value. Unnoticed, fc3's average lands on top of
// fc2's, which shows whenever the two averages differ (ranks whose graphs
// differ, Join, static graphs with unused parameters).
//
// DDP finds the sharing once per graph, not per step: Grad groups the
// parameters whose hooks read the same node (autogradhooks.SharedGradients),
// and the first run after Grad also compares the memory of every gradient
// with the ones before it (gradients that are views of one another). Every
// parameter of a group but the first gets a tensor of DDP's own; its hook
// copies the gradient there, hands that to the reducer, and returns it as
// the gradient's Value, so params[i].Grad() is that tensor. The others keep
// the copy-free path. The reducer checks the same invariant on every
// synchronised iteration (reducer: Note [one memory per result]) and fails,
// naming both parameters, rather than overwrite one result with another.
//
// Note [every parameter is stepped]
//
// torch's DDP gives every parameter that some rank used the averaged
// gradient on every rank, also on the ranks whose graph did not reach it
// (c10d's copy_bucket_to_grad creates the grad there), and leaves a
// parameter that no rank used untouched: its grad stays None until some
// rank first uses it (and the optimizer skips it), and afterwards stays
// what zero_grad made it, zeros in torch 1.13. A Gorgonia graph that does
// not reach a parameter has no gradient node for it, so after each
// synchronised RunAll DDP copies the reduced gradient of such a parameter
// (Reducer.Gradient) into a tensor of its own, or zeros it when no rank
// used it. ValueGrads and StepTensors hand out every parameter, in Wrap's
// order, on every call: solvers keep their state by position, so a list
// that differed between ranks or steps would mix up their state.

// gradSpan is the memory of one gradient, for the probe.
type gradSpan struct {
	start, end uintptr
	param      int
}

// hookGradient is the gradient hook: parameter i's gradient v has just
// been computed, on the tape's goroutine.
func (d *DDP) hookGradient(i int, v gorgonia.Value) (gorgonia.Value, error) {
	if d.views != nil {
		return d.placeGradient(i, v) // view.go: in bucket memory, of its own
	}
	if d.probe && !d.shared[i] {
		shared, err := d.sharesMemory(i, v)
		if err != nil {
			return nil, err
		}
		d.shared[i] = shared
	}
	if !d.shared[i] {
		return nil, d.onGradient(i, v)
	}
	own, err := copyValue(d.own[i], v)
	if err != nil {
		return nil, fmt.Errorf("%w: parameter %d: %v", reducer.ErrBadGradient, i, err)
	}
	d.own[i] = own
	t, err := gtensor.TensorOf(own)
	if err != nil {
		return nil, fmt.Errorf("%w: parameter %d: %v", reducer.ErrBadGradient, i, err)
	}
	return own, d.r.MarkReady(i, t)
}

// sharesMemory reports whether v overlaps a gradient handed over earlier in
// this run, and records it.
func (d *DDP) sharesMemory(i int, v gorgonia.Value) (bool, error) {
	t, err := gtensor.TensorOf(v)
	if err != nil || len(t.Data) == 0 {
		return false, err // the reducer reports a gradient it cannot take
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(t.Data)))
	s := gradSpan{start: start, end: start + uintptr(len(t.Data)), param: i}
	for _, o := range d.seen {
		if s.start < o.end && o.start < s.end {
			d.r.Options().Logger.Info("two parameters' gradients share memory; the second gets a copy of its own",
				zap.String("param", d.params[i].Name()), zap.String("shares_with", d.params[o.param].Name()))
			return true, nil
		}
	}
	d.seen = append(d.seen, s)
	return false, nil
}

// fillUnused gives each parameter this rank's graph does not reach its
// result after a synchronised iteration: Note [every parameter is stepped].
func (d *DDP) fillUnused() {
	unusedAll := d.r.GloballyUnused()
	for i := range d.params {
		if d.local[i] {
			d.defined[i] = true // used here, so used somewhere
			continue
		}
		if unusedAll != nil && unusedAll[i] {
			zeroValue(d.own[i]) // untouched in torch: None, or zeros after zero_grad
			continue
		}
		copyInto(d.own[i], d.r.Gradient(i))
		d.defined[i] = true
	}
}

// ValueGrads returns every parameter, in Wrap's order, for a Gorgonia
// solver's Step. After a synchronised RunAll each one's gradient is the
// average over ranks, also where this rank's graph does not reach the
// parameter; a parameter that no rank used has a zero gradient (Note
// [every parameter is stepped]).
//
// torch's optimizers skip a parameter whose grad is None (no rank has ever
// used it); Gorgonia's solvers cannot skip one without shifting the state
// they keep by position, so it is stepped with zeros. That leaves it
// unchanged under plain SGD and Adam, but weight decay (WithL2Reg,
// WithL1Reg) would move it where torch does not: ValueGrads logs a warning
// naming such parameters, once. StepTensors with package optim skips them
// as torch does.
func (d *DDP) ValueGrads() []gorgonia.ValueGrad {
	out := make([]gorgonia.ValueGrad, len(d.params))
	var undefined []int
	for i, p := range d.params {
		if d.local != nil && d.local[i] {
			out[i] = p
			continue
		}
		if !d.defined[i] {
			undefined = append(undefined, i)
		}
		out[i] = ownGrad{p, d.own[i]}
	}
	if len(undefined) > 0 && !d.warned {
		d.warned = true
		d.r.Options().Logger.Warn("no rank has produced a gradient for these parameters yet; ValueGrads steps them with "+
			"zero gradients, which moves them only under weight decay (torch would skip them; ddp.StepTensors with package "+
			"optim does)",
			zap.String("params", d.names(undefined)))
	}
	return out
}

// StepTensors returns every parameter's value and gradient, in Wrap's
// order, as package optim's Step takes them (views, no copies). After a
// synchronised RunAll each gradient is the average over ranks, also where
// this rank's graph does not reach the parameter. grads[i] has nil Data
// where no rank has produced a gradient for parameter i yet, torch's None,
// which optim skips; once some rank has, a parameter no rank used in an
// iteration has a zero gradient, as after torch 1.13's zero_grad (Note
// [every parameter is stepped]).
func (d *DDP) StepTensors() (params, grads []pg.Tensor, err error) {
	if !d.graded {
		return nil, nil, fmt.Errorf("ddp: call Grad(cost) and RunAll before StepTensors")
	}
	if params, err = d.ParamTensors(); err != nil {
		return nil, nil, err
	}
	grads = make([]pg.Tensor, len(d.params))
	for i, p := range d.params {
		g := d.own[i]
		if d.local[i] {
			if g, err = p.Grad(); err != nil {
				return nil, nil, fmt.Errorf(
					"ddp: parameter %d (%s) has no gradient; call StepTensors after RunAll and before vm.Reset", i, p.Name())
			}
		} else if !d.defined[i] {
			grads[i] = pg.Tensor{Dtype: params[i].Dtype}
			continue
		}
		if grads[i], err = gtensor.TensorOf(g); err != nil {
			return nil, nil, fmt.Errorf("ddp: gradient of parameter %d (%s): %w", i, p.Name(), err)
		}
	}
	return params, grads, nil
}

// ParamTensors views every parameter's value as a tensor, in Wrap's order
// (no copies).
func (d *DDP) ParamTensors() ([]pg.Tensor, error) {
	out := make([]pg.Tensor, len(d.params))
	for i, p := range d.params {
		var err error
		if out[i], err = gtensor.TensorOf(p.Value()); err != nil {
			return nil, fmt.Errorf("ddp: parameter %d (%s): %w", i, p.Name(), err)
		}
	}
	return out, nil
}

// VerifyReplicas checks that every rank holds bitwise the same parameters
// (reducer.Reducer.VerifyReplicas): on a mismatch every rank returns
// reducer.ErrReplicasDiverged naming the first parameter that differs and
// the ranks. It is collective. Options.CheckReplicasEvery runs it from
// RunAll; call it yourself at other points, after the optimizer step.
func (d *DDP) VerifyReplicas(ctx context.Context) error {
	values, err := d.ParamTensors()
	if err != nil {
		return err
	}
	return d.r.VerifyReplicas(ctx, values)
}

// ownGrad is a parameter with a gradient Value of DDP's own.
type ownGrad struct {
	n    *gorgonia.Node
	grad gorgonia.Value
}

func (o ownGrad) Value() gorgonia.Value         { return o.n.Value() }
func (o ownGrad) Grad() (gorgonia.Value, error) { return o.grad, nil }
func (o ownGrad) Name() string                  { return o.n.Name() }

// zeroLike returns a zero Value of v's type, shape and dtype.
func zeroLike(v gorgonia.Value) (gorgonia.Value, error) {
	switch v := v.(type) {
	case *tensor.Dense:
		return tensor.New(tensor.WithShape(v.Shape().Clone()...), tensor.Of(v.Dtype())), nil
	case *gorgonia.F32:
		return gorgonia.NewF32(0), nil
	case *gorgonia.F64:
		return gorgonia.NewF64(0), nil
	}
	return nil, fmt.Errorf("values of type %T can't be reduced; use float32 or float64 tensors", v)
}

// copyValue copies src into dst, or into a new Value like src when dst is
// nil or unlike it, and returns where it went.
func copyValue(dst, src gorgonia.Value) (gorgonia.Value, error) {
	if dst == nil || !dst.Shape().Eq(src.Shape()) || dst.Dtype() != src.Dtype() {
		var err error
		if dst, err = zeroLike(src); err != nil {
			return nil, err
		}
	}
	t, err := gtensor.TensorOf(src)
	if err != nil {
		return nil, err
	}
	copyInto(dst, t)
	return dst, nil
}

// copyInto copies t's bytes into v's memory; both hold the same dtype and
// number of elements.
func copyInto(v gorgonia.Value, t pg.Tensor) {
	if dst, err := gtensor.TensorOf(v); err == nil {
		copy(dst.Data, t.Data)
	}
}

func zeroValue(v gorgonia.Value) {
	if t, err := gtensor.TensorOf(v); err == nil {
		clear(t.Data)
	}
}
