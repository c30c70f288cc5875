package ddp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/goddp/ddp/autogradhooks"
	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// DDP wraps a Gorgonia model for data-parallel training: the Reducer plus
// the gradient hooks that feed it from inside TapeMachine.RunAll.
//
//	d, err := ddp.Wrap(ctx, group, params, ddp.Options{})
//	// build the forward graph with d.Node(i) wherever params[i] is used
//	grads, err := d.Grad(cost)
//	vm := gorgonia.NewTapeMachine(g)           // no BindDualValues
//	for step := ... {
//		gorgonia.Let(x, batch) ...
//		err := d.RunAll(ctx, vm)               // forward, backward, averaged grads
//		solver.Step(d.ValueGrads())
//		vm.Reset()
//	}
type DDP struct {
	r      *reducer.Reducer
	params gorgonia.Nodes
	hooks  *autogradhooks.Set
	unused []int
	graded bool
	views  []*tensor.Dense // GradientAsBucketView: each gradient's bucket view, as a Value
	placed atomic.Int64    // GradientAsBucketView: bytes copied into bucket views by the hooks

	// See Note [a gradient of its own] and Note [every parameter is stepped].
	local   []bool           // per parameter: this rank's graph reaches it (it has a gradient node)
	shared  []bool           // per parameter: Gorgonia's gradient Value is shared with another parameter's
	own     []gorgonia.Value // per parameter: the gradient memory DDP owns for it (shared or not local); nil otherwise
	probe   bool             // the first run after Grad: watch the gradients for shared memory
	seen    []gradSpan       // probe: the gradients of this run so far
	defined []bool           // per parameter: some rank has produced a gradient for it (torch: grad is not None)
	warned  bool             // ValueGrads has logged that it steps undefined gradients
	syncs   int              // synchronised iterations run, for Options.CheckReplicasEvery
}

// Wrap checks that every rank holds the same model, copies rank 0's
// parameter values to every rank (Gorgonia's initialisers are seeded from
// the clock, so replicas start different), and prepares the gradient
// hooks. Every parameter must have a value. It is collective.
func Wrap(ctx context.Context, g pg.ProcessGroup, params gorgonia.Nodes, opts Options) (*DDP, error) {
	if opts.MixedPrecision != nil {
		// Gorgonia v0.9.18 computes in float32 and float64 only: tensor
		// v0.9.24 has no float16 or bfloat16 dtype, and one registered by
		// hand fails in every arithmetic and BLAS op. So it cannot produce
		// the low-precision gradients MixedPrecision reduces.
		return nil, errors.New("ddp: Options.MixedPrecision needs float16 or bfloat16 gradients, which Gorgonia cannot " +
			"compute (gorgonia.org/tensor has no such dtype); leave it nil here, or drive reducer.New from an engine that " +
			"computes in half precision")
	}
	descs := make([]reducer.Param, len(params))
	values := make([]pg.Tensor, len(params))
	for i, p := range params {
		if p == nil || p.Value() == nil {
			return nil, fmt.Errorf("ddp: parameter %d has no value; models with uninitialised parameters can't be wrapped: "+
				"give every parameter a value (gorgonia.WithInit or WithValue) first", i)
		}
		dt, err := gtensor.DtypeOf(p.Dtype())
		if err != nil {
			return nil, fmt.Errorf("ddp: parameter %d (%s): %w", i, p.Name(), err)
		}
		descs[i] = reducer.Param{Name: p.Name(), Shape: p.Shape().Clone(), Dtype: dt}
		if descs[i].Name == "" {
			descs[i].Name = fmt.Sprintf("param%d", i)
		}
		v, err := gtensor.TensorOf(p.Value())
		if err != nil {
			return nil, fmt.Errorf("ddp: parameter %d (%s): %w", i, descs[i].Name, err)
		}
		values[i] = v
	}
	r, err := reducer.New(ctx, g, descs, opts)
	if err != nil {
		return nil, err
	}
	if err := r.BroadcastParams(ctx, values); err != nil {
		return nil, err
	}
	d := &DDP{r: r, params: params, defined: make([]bool, len(params))}
	if opts.GradientAsBucketView {
		d.views = make([]*tensor.Dense, len(params))
	}
	d.hooks, err = autogradhooks.NewPlacing(params, d.hookGradient)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Reducer returns the reducer, for hooks, inspection and metrics.
func (d *DDP) Reducer() *reducer.Reducer { return d.r }

// Node returns parameter i wrapped with its gradient hook. Call it where
// the forward graph uses the parameter, layer by layer: the hook fires in
// backward at the point matching where the wrapper was created (see
// autogradhooks).
func (d *DDP) Node(i int) *gorgonia.Node { return d.hooks.Node(i) }

// Grad adds the backward graph for cost and returns the gradient node of
// each parameter (nil for parameters the loss does not reach). Unused
// parameters need FindUnusedParameters (or StaticGraph).
func (d *DDP) Grad(cost *gorgonia.Node) (gorgonia.Nodes, error) {
	if d.r.Observing() { // mark where backward starts, for the timings
		var err error
		if cost, err = autogradhooks.MarkBackward(cost, d.r.MarkBackwardStart); err != nil {
			return nil, err
		}
	}
	grads, unused, err := d.hooks.Grad(cost)
	if err != nil {
		return nil, bypassed(err)
	}
	if o := d.r.Options(); len(unused) > 0 && !o.FindUnusedParameters && !o.StaticGraph {
		return nil, fmt.Errorf("ddp: parameters %s are not used in producing the loss; set Options.FindUnusedParameters "+
			"(ddp-train --find-unused-parameters), or make every parameter take part in the loss", d.names(unused))
	}
	d.unused, d.graded = unused, true
	d.local = make([]bool, len(d.params))
	d.shared = make([]bool, len(d.params))
	d.own = make([]gorgonia.Value, len(d.params))
	for i, g := range grads {
		d.local[i] = g != nil
		if g == nil { // a gradient of DDP's own, zero until some rank uses it
			if d.own[i], err = zeroLike(d.params[i].Value()); err != nil {
				return nil, fmt.Errorf("ddp: parameter %d (%s): %w", i, d.params[i].Name(), err)
			}
		}
	}
	for _, group := range autogradhooks.SharedGradients(grads) {
		for _, i := range group[1:] { // the first keeps Gorgonia's memory
			d.shared[i] = true
		}
	}
	d.probe = true
	return grads, nil
}

// bypassed says autogradhooks' "build the forward graph from Set.Node"
// in the words of this package's API: the Set is internal to a DDP, and
// what its user calls is d.Node. The *BypassError stays in the chain for
// errors.As, but not in the message, which would name Set.Node again.
func bypassed(err error) error {
	var b *autogradhooks.BypassError
	if !errors.As(err, &b) {
		return err
	}
	if b.Partly {
		return &restated{fmt.Sprintf("ddp: parameter %d (%s) reaches the loss both through d.Node(%d) and directly, so its "+
			"gradient hook would see only part of its gradient; "+
			"build the forward graph with d.Node(%d) (DDP.Node) at every use of parameter %d", b.Index, b.Param, b.Index,
			b.Index, b.Index), err}
	}
	return &restated{fmt.Sprintf("ddp: parameter %d (%s) reaches the loss directly, not through d.Node(%d), so its "+
		"gradient hook would never fire and its bucket never be reduced; "+
		"build the forward graph with d.Node(%d) (DDP.Node) wherever parameter %d is used", b.Index, b.Param, b.Index,
		b.Index, b.Index), err}
}

// restated is err said in other words.
type restated struct {
	msg string
	err error
}

func (r *restated) Error() string { return r.msg }
func (r *restated) Unwrap() error { return r.err }

// Unused lists the parameters the loss does not reach.
func (d *DDP) Unused() []int { return d.unused }

// RunAll runs one synchronised iteration on vm: forward, backward with
// each bucket's allreduce launched as soon as it is ready, then the wait
// for all of them. Afterwards every parameter's gradient holds the
// average over ranks. Call vm.Reset() before the next RunAll.
//
// With Options.CheckFinite, a *reducer.NonFiniteError (errors.Is
// reducer.ErrNonFinite) says that some average holds a NaN or an
// infinity. It comes on every rank at the same iteration, which is
// complete: stop, or skip this optimizer step and go on.
func (d *DDP) RunAll(ctx context.Context, vm gorgonia.VM) error { return d.run(ctx, vm, true) }

// RunAllNoSync runs an iteration without communication: gradients
// accumulate locally until the next RunAll reduces their sum, as DDP's
// no_sync. The parameters' own gradients after it are this iteration's
// only; do not step the optimizer.
func (d *DDP) RunAllNoSync(ctx context.Context, vm gorgonia.VM) error { return d.run(ctx, vm, false) }

func (d *DDP) run(ctx context.Context, vm gorgonia.VM, sync bool) error {
	if !d.graded {
		return fmt.Errorf("ddp: call Grad(cost) on the DDP wrapper before running the model")
	}
	if every := d.r.Options().CheckReplicasEvery; sync && every > 0 && d.syncs > 0 && d.syncs%every == 0 {
		if err := d.VerifyReplicas(ctx); err != nil {
			return err
		}
	}
	if sync {
		d.syncs++
	}
	if err := d.r.Prepare(ctx, reducer.Iteration{Sync: sync, Unused: d.unused}); err != nil {
		return err
	}
	d.seen = d.seen[:0]
	if err := autogradhooks.RunAll(vm); err != nil {
		// The reducer is mid-iteration and out of step with its peers.
		return d.r.Fail(fmt.Errorf("ddp: backward failed: %w", err))
	}
	d.probe = false
	d.r.MarkBackwardEnd()
	err := d.r.Finalize(ctx)
	var nonFinite *reducer.NonFiniteError
	if err != nil && !errors.As(err, &nonFinite) {
		return err
	}
	if sync { // also after a NonFiniteError: the iteration completed
		d.fillUnused()
	}
	return err
}

func (d *DDP) names(indices []int) string {
	params := d.r.Params()
	parts := make([]string, len(indices))
	for i, idx := range indices {
		parts[i] = params[idx].Name
	}
	return strings.Join(parts, ", ")
}

func (d *DDP) onGradient(i int, v gorgonia.Value) error {
	t, err := gtensor.TensorOf(v)
	if err != nil {
		return fmt.Errorf("%w: parameter %d: %v", reducer.ErrBadGradient, i, err)
	}
	return d.r.MarkReady(i, t)
}
