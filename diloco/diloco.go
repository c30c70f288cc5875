package diloco

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Options configure New. The zero value of a pointer field is its
// default.
type Options struct {
	// SyncEvery is H, the inner steps between two synchronisations of a
	// fragment: at least 1.
	SyncEvery int
	// OuterLR is the outer optimizer's rate: default 0.7 (DiLoCo's and
	// OpenDiLoCo's).
	OuterLR *float64
	// OuterMomentum is the outer optimizer's momentum, Nesterov's as torch's
	// SGD(nesterov=True) when positive: default 0.9; 0 is plain SGD.
	OuterMomentum *float64
	// Fragments is F, the parts the parameters are split into (Streaming
	// DiLoCo): fragment i is synchronised at inner steps
	// floor(H/F·(i+1)) + k·H, as torchft's DiLoCo staggers them. Default 1:
	// plain DiLoCo, every H steps. At most H.
	Fragments int
	// Delay is τ, the inner steps a fragment's reduction overlaps: its
	// pseudo-gradient is sent at its step and applied τ steps later.
	// Default 0; less than H/F.
	Delay int
	// Alpha mixes on arrival: a fragment's parameters become
	// Alpha·local + (1−Alpha)·global. Default 0 (every rank continues from
	// the global parameters), in [0, 1].
	Alpha float64
	// Quantize is the dtype the pseudo-gradients travel in: pg.Float16 or
	// pg.BFloat16 (divided by the ranks, converted, summed in that dtype,
	// converted back, as commhook.Compress does), or 0 for the parameters'
	// own.
	Quantize pg.Dtype
	// Int8 sends the pseudo-gradients as int8 values with a float32 scale
	// per 256 of them, reduce-scattered and allgathered (Note [int8
	// pseudo-gradients]): about a quarter of a float32 allreduce's bytes.
	// Not with Quantize. The group must offer AllToAll (pg.AllToAller).
	Int8 bool
	// Uneven is for ranks with uneven inputs (a Join): a rank that has run
	// out of batches calls StepJoined instead of Step, contributing no
	// pseudo-gradient, and each average is over the ranks still training
	// (Note [DiLoCo under Join]). It costs one value more per reduction, and
	// sums before dividing. Not with Int8.
	Uneven bool
}

// DiLoCo is DiLoCo (Douillard et al. 2023, arXiv 2311.08105) and its
// streaming form (arXiv 2501.18512) over a process group: every rank
// steps its own inner optimizer on its own batches with no communication,
// and every H inner steps each fragment's pseudo-gradient, the global
// parameters minus this rank's (the paper's sign), is averaged over the
// ranks and stepped into the global parameters by an outer SGD with
// Nesterov momentum; every rank then continues from the new global
// parameters (see Note [DiLoCo step by step]). It is not safe for
// concurrent use; every rank calls Step after each inner step.
type DiLoCo struct {
	g        pg.ProcessGroup
	o        Options
	lr, mom  float64
	dtype    pg.Dtype
	sizes    []int
	global   []pg.Tensor // the global parameters, copies
	frags    []*fragment
	step     int   // inner steps counted
	sent     int64 // pseudo-gradient bytes sent
	averages bool  // OuterLR 1, no momentum, no quantisation: parameter averaging (Note [DiLoCo as averaging])
}

// fragment is one part of the parameters, synchronised on its own
// schedule.
type fragment struct {
	params []int           // indices into the parameters, ascending
	offset int             // its first synchronisation, torchft's fragment_sync_offset
	outer  optim.Optimizer // over the fragment's global parameters
	buf    pg.Tensor       // the pseudo-gradients in flight (the parameters' dtype)
	wire   pg.Tensor       // buf as sent, in Options.Quantize's dtype; buf itself without
	work   pg.Work         // the reduction in flight; nil once waited for
	q      *int8Reduce     // Options.Int8's reduction; nil without
	sentAt int             // the inner step it was sent at
	// pending: sent and not yet applied (buf holds the average once work
	// is nil)
	pending bool
}

// Note [DiLoCo step by step], after the paper (Algorithm 1) and torchft's
// DiLoCo (meta-pytorch/torchft, torchft/local_sgd.py at 02fbea2 for
// DiLoCo and the streaming version for fragments), inner step t counted
// from 1 after the inner optimizer's step:
//
//  1. For each fragment f with t = offset_f + k·H (k ≥ 0) the rank
//     computes Δ = θ_global − θ_local over f's parameters (the paper's sign;
//     torchft at 02fbea2 subtracts the other way and compensates nowhere),
//     divides it by the ranks, and starts a SUM allreduce of it (in
//     Quantize's dtype when set).
//  2. For each fragment f with t = offset_f + Delay + k·H whose reduction
//     was sent, it waits for that reduction, steps the global parameters
//     of f with the outer optimizer taking the average Δ as gradient, and
//     sets f's parameters to Alpha·θ_local + (1−Alpha)·θ_global. With
//     Delay 0 both happen at the same step.
//
// offset_f = floor(H/F·(f+1)), so with one fragment it is H: the first
// synchronisation follows the H-th inner step. The inner optimizer's state
// is never touched.
//
// Note [DiLoCo under Join]: with uneven inputs a rank runs out of batches
// before the others. Under a Join (reducer.Join, ddp.DDP.NewJoin) it
// shadows their iterations, and there (JoinOptions.OnShadowStep) it calls
// StepJoined, so that it still counts the inner steps and takes part in
// every reduction, at the same steps as the others. With Options.Uneven
// each reduction carries one value more, 1 from a training rank and 0
// from a joined one, and is summed before it is divided: the average is
// over the ranks that trained, torch Join's rule for gradients. A joined
// rank's pseudo-gradient is zeros, and on arrival its parameters become
// the global ones.
//
// Note [DiLoCo as averaging]: with OuterLR 1, no momentum and no
// quantisation the outer step is θ_global − (θ_global − mean θ_local),
// which is mean θ_local, but in floating point not to the bit. So this
// case averages the parameters themselves (the same bytes on the wire):
// each rank sends θ_local divided by the ranks, and the sum is the new
// global parameters, exactly what averaging.AverageParameters computes.

// New returns a DiLoCo over g for params, whose values now are the global
// parameters. params must all be float32, or all float64, in host memory.
func New(g pg.ProcessGroup, params []pg.Tensor, o Options) (*DiLoCo, error) {
	o, err := o.normalized()
	if err != nil {
		return nil, err
	}
	if g == nil {
		return nil, errors.New("diloco: no process group")
	}
	dtype, err := dtypeOf(params)
	if err != nil {
		return nil, err
	}
	d := &DiLoCo{g: g, o: o, lr: 0.7, mom: 0.9, dtype: dtype}
	if o.OuterLR != nil {
		d.lr = *o.OuterLR
	}
	if o.OuterMomentum != nil {
		d.mom = *o.OuterMomentum
	}
	d.averages = d.lr == 1 && d.mom == 0 && o.Quantize == 0 && !o.Int8
	for _, p := range params {
		d.sizes = append(d.sizes, p.Len())
		c := pg.NewTensor(p.Dtype, p.Len())
		copy(c.Data, p.Data)
		d.global = append(d.global, c)
	}
	if d.frags, err = d.split(); err != nil {
		return nil, err
	}
	return d, nil
}

// Validate reports what New would refuse in o, before any group or
// parameters are at hand.
func (o Options) Validate() error {
	_, err := o.normalized()
	return err
}

// normalized is o with its defaults filled in, or why it cannot run.
func (o Options) normalized() (Options, error) {
	if o.Fragments == 0 {
		o.Fragments = 1
	}
	return o, o.check()
}

func (o Options) check() error {
	switch {
	case o.SyncEvery < 1:
		return fmt.Errorf("diloco: SyncEvery %d: want at least 1 inner step between synchronisations", o.SyncEvery)
	case o.Fragments < 1 || o.Fragments > o.SyncEvery:
		return fmt.Errorf("diloco: Fragments %d: want 1 to SyncEvery (%d): only one fragment is synchronised at a "+
			"step", o.Fragments, o.SyncEvery)
	case o.Delay < 0 || o.Delay >= o.SyncEvery/o.Fragments:
		return fmt.Errorf("diloco: Delay %d: want 0 to SyncEvery/Fragments − 1 (%d), so that a fragment arrives "+
			"before the next one is sent", o.Delay, o.SyncEvery/o.Fragments-1)
	case !(o.Alpha >= 0 && o.Alpha <= 1):
		return fmt.Errorf("diloco: Alpha %v: want a number in [0, 1]", o.Alpha)
	case o.Uneven && o.Int8:
		return errors.New("diloco: Uneven and Int8: the count of training ranks would not survive int8; use Quantize")
	case o.Int8 && o.Quantize != 0:
		return fmt.Errorf("diloco: Int8 and Quantize %v: give one of them", o.Quantize)
	case o.Quantize != 0 && o.Quantize != pg.Float16 && o.Quantize != pg.BFloat16:
		return fmt.Errorf("diloco: Quantize %v: want float16, bfloat16, or 0 for the parameters' dtype", o.Quantize)
	}
	for _, f := range []*float64{o.OuterLR, o.OuterMomentum} {
		if f != nil && !(*f >= 0) {
			return fmt.Errorf("diloco: outer rate and momentum must be numbers >= 0, not %v", *f)
		}
	}
	return nil
}

// dtypeOf is the parameters' one dtype.
func dtypeOf(params []pg.Tensor) (pg.Dtype, error) {
	if len(params) == 0 {
		return 0, errors.New("diloco: no parameters")
	}
	d := params[0].Dtype
	for i, p := range params {
		switch {
		case p.IsDevice():
			return 0, fmt.Errorf("diloco: parameter %d is in device memory; DiLoCo keeps host copies", i)
		case p.Dtype != pg.Float32 && p.Dtype != pg.Float64:
			return 0, fmt.Errorf("diloco: parameter %d is %v; want float32 or float64", i, p.Dtype)
		case p.Dtype != d:
			return 0, fmt.Errorf("diloco: parameter %d is %v but parameter 0 is %v; want one dtype", i, p.Dtype, d)
		}
	}
	return d, nil
}

// split cuts the parameters into Options.Fragments runs of consecutive
// parameters of about equal size, each with its own outer optimizer.
func (d *DiLoCo) split() ([]*fragment, error) {
	F, total := d.o.Fragments, 0
	for _, n := range d.sizes {
		total += n
	}
	if F > len(d.sizes) {
		return nil, fmt.Errorf("diloco: %d fragments of %d parameters; want at most one fragment per parameter", F,
			len(d.sizes))
	}
	frags := make([]*fragment, F)
	i, sum := 0, 0
	for f := range F {
		fr := &fragment{offset: d.o.SyncEvery * (f + 1) / F}
		// each fragment takes parameters until its share is reached, leaving
		// at least one for each later fragment
		for i < len(d.sizes)-(F-1-f) && (len(fr.params) == 0 || f == F-1 || sum+d.sizes[i] <= total*(f+1)/F) {
			fr.params = append(fr.params, i)
			sum += d.sizes[i]
			i++
		}
		n := 0
		for _, j := range fr.params {
			n += d.sizes[j]
		}
		if d.o.Uneven {
			n++ // the count of ranks contributing, last
		}
		fr.buf = pg.NewTensor(d.dtype, n)
		if d.o.Quantize != 0 {
			fr.wire = pg.NewTensor(d.o.Quantize, n)
		}
		if d.o.Int8 {
			var err error
			if fr.q, err = newInt8(d.g, n); err != nil {
				return nil, err
			}
		}
		var err error
		o := optim.Options{LR: optim.Set(d.lr), Momentum: optim.Set(d.mom), Nesterov: d.mom > 0}
		if fr.outer, err = optim.NewWith("sgd", o, len(fr.params)); err != nil {
			return nil, fmt.Errorf("diloco: the outer optimizer: %w", err)
		}
		frags[f] = fr
	}
	return frags, nil
}

// Step counts one inner step and does what the step calls for (Note
// [DiLoCo step by step]): it sends the pseudo-gradients of the fragments
// due, and applies those whose reduction is due. params are the
// parameters New was given, after the inner optimizer's step. It returns
// the fragments it applied. It is collective: every rank calls it after
// every inner step.
func (d *DiLoCo) Step(ctx context.Context, params []pg.Tensor) (applied []int, err error) {
	return d.stepAs(ctx, params, false)
}

// StepJoined is Step for a rank that has run out of batches (Options.Uneven,
// Note [DiLoCo under Join]): it counts the inner step the others take and
// joins their reductions with no pseudo-gradient of its own; on arrival its
// parameters become the global ones. Under a ddp Join, call it from
// JoinOptions.OnShadowStep.
func (d *DiLoCo) StepJoined(ctx context.Context, params []pg.Tensor) (applied []int, err error) {
	if !d.o.Uneven {
		return nil, errors.New("diloco: StepJoined needs Options.Uneven, on every rank")
	}
	return d.stepAs(ctx, params, true)
}

func (d *DiLoCo) stepAs(ctx context.Context, params []pg.Tensor, joined bool) (applied []int, err error) {
	if err := d.checkParams(params); err != nil {
		return nil, err
	}
	d.step++
	H := d.o.SyncEvery
	for _, f := range d.frags {
		if d.step >= f.offset && (d.step-f.offset)%H == 0 {
			if err := d.send(ctx, f, params, joined); err != nil {
				return nil, err
			}
		}
	}
	for _, f := range d.frags { // int8's second collective, the step after the first (Note [int8 pseudo-gradients])
		if f.q != nil && f.q.phase == 1 && f.sentAt < d.step {
			if err := f.q.middle(ctx); err != nil {
				return nil, err
			}
			d.sent += int64(f.q.L)
		}
	}
	for i, f := range d.frags {
		if f.pending && d.step >= f.offset+d.o.Delay && (d.step-f.offset-d.o.Delay)%H == 0 {
			if err := d.apply(ctx, f, params, joined); err != nil {
				return applied, fmt.Errorf("diloco: fragment %d at inner step %d: %w", i, d.step, err)
			}
			applied = append(applied, i)
		}
	}
	return applied, nil
}

// checkParams refuses parameters that are not New's.
func (d *DiLoCo) checkParams(params []pg.Tensor) error {
	if len(params) != len(d.sizes) {
		return fmt.Errorf("diloco: %d parameters, but New was given %d", len(params), len(d.sizes))
	}
	for i, p := range params {
		if p.Len() != d.sizes[i] || p.Dtype != d.dtype {
			return fmt.Errorf("diloco: parameter %d is %d %v values, but New was given %d %v", i, p.Len(), p.Dtype,
				d.sizes[i], d.dtype)
		}
	}
	return nil
}

// send starts fragment f's reduction: Δ = global − local divided by the
// ranks (or, averaging, local divided by the ranks).
func (d *DiLoCo) send(ctx context.Context, f *fragment, params []pg.Tensor, joined bool) error {
	if f.pending {
		return errors.New("diloco: a fragment was sent again before its last reduction was applied")
	}
	off := 0
	for _, i := range f.params {
		dst := f.buf.Slice(off, off+d.sizes[i])
		switch {
		case joined:
			clear(dst.Data)
		case d.averages:
			copy(dst.Data, params[i].Data)
		default:
			subtract(dst, d.global[i], params[i])
		}
		off += d.sizes[i]
	}
	if d.o.Uneven { // summed, then divided by the count on arrival
		count := 1.0
		if joined {
			count = 0
		}
		Narrow(f.buf.Slice(off, off+1), []float64{count})
	} else if err := commhook.Divide(f.buf, d.g.Size()); err != nil {
		return err
	}
	f.sentAt = d.step
	if f.q != nil {
		f.pending = true
		d.sent += int64(len(f.q.send))
		return f.q.start(ctx, Widen(f.buf))
	}
	wire := f.buf
	if d.o.Quantize != 0 {
		if err := backend.Convert(f.wire, f.buf); err != nil {
			return err
		}
		wire = f.wire
	}
	f.work, f.pending = d.g.AllReduce(ctx, wire, pg.Op(pg.Sum)), true
	d.sent += int64(len(wire.Data))
	return nil
}

// apply waits for fragment f's reduction and steps its global parameters.
func (d *DiLoCo) apply(ctx context.Context, f *fragment, params []pg.Tensor, joined bool) error {
	if err := d.wait(ctx, f); err != nil {
		return err
	}
	f.pending = false
	if err := d.divideByCount(f); err != nil {
		return err
	}
	globals, grads := make([]pg.Tensor, len(f.params)), make([]pg.Tensor, len(f.params))
	off := 0
	for k, i := range f.params {
		globals[k], grads[k] = d.global[i], f.buf.Slice(off, off+d.sizes[i])
		off += d.sizes[i]
	}
	if d.averages {
		for k := range globals {
			copy(globals[k].Data, grads[k].Data)
		}
	} else if err := f.outer.Step(globals, grads); err != nil {
		return fmt.Errorf("the outer step: %w", err)
	}
	alpha := d.o.Alpha
	if joined {
		alpha = 0 // nothing local to keep
	}
	for _, i := range f.params {
		mix(params[i], d.global[i], alpha)
	}
	return nil
}

// divideByCount turns an Uneven fragment's sum into the average over the
// ranks that contributed, the count its last value holds.
func (d *DiLoCo) divideByCount(f *fragment) error {
	if !d.o.Uneven {
		return nil
	}
	n := f.buf.Len() - 1
	count := int(math.Round(Widen(f.buf.Slice(n, n+1))[0]))
	if count < 1 {
		return errors.New("no rank contributed a pseudo-gradient: every rank had joined")
	}
	return commhook.Divide(f.buf.Slice(0, n), count)
}

// wait finishes fragment f's reduction in flight, if any, into f.buf.
func (d *DiLoCo) wait(ctx context.Context, f *fragment) error {
	if f.q != nil && f.q.phase != 0 {
		if f.q.phase == 1 {
			d.sent += int64(f.q.L)
		}
		out := make([]float64, f.buf.Len())
		if err := f.q.finish(ctx, out); err != nil {
			return err
		}
		Narrow(f.buf, out)
		return nil
	}
	if f.work == nil {
		return nil
	}
	w := f.work
	f.work = nil
	if err := w.Wait(ctx); err != nil {
		return fmt.Errorf("averaging the pseudo-gradients over %d ranks: %w", d.g.Size(), err)
	}
	if d.o.Quantize != 0 {
		return backend.Convert(f.buf, f.wire)
	}
	return nil
}

// subtract writes a − b into dst, elementwise.
func subtract(dst, a, b pg.Tensor) {
	switch dst.Dtype {
	case pg.Float32:
		x, y, z := pg.View[float32](dst), pg.View[float32](a), pg.View[float32](b)
		for i := range x {
			x[i] = y[i] - z[i]
		}
	case pg.Float64:
		x, y, z := pg.View[float64](dst), pg.View[float64](a), pg.View[float64](b)
		for i := range x {
			x[i] = y[i] - z[i]
		}
	}
}

// mix sets local to alpha·local + (1−alpha)·global; a plain copy for
// alpha 0.
func mix(local, global pg.Tensor, alpha float64) {
	if alpha == 0 {
		copy(local.Data, global.Data)
		return
	}
	switch local.Dtype {
	case pg.Float32:
		x, y := pg.View[float32](local), pg.View[float32](global)
		a := float32(alpha)
		for i := range x {
			x[i] = a*x[i] + (1-a)*y[i]
		}
	case pg.Float64:
		x, y := pg.View[float64](local), pg.View[float64](global)
		for i := range x {
			x[i] = alpha*x[i] + (1-alpha)*y[i]
		}
	}
}
