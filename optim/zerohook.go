package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"github.com/goddp/ddp/timeline"
)

// ZeroHookOptions configure Zero.Hook.
type ZeroHookOptions struct {
	// Deferred is torch's hook_with_zero_step: no bucket is stepped until
	// the iteration's last bucket has been handed to the hook, so the
	// steps overlap only the reductions still in flight, never backward's
	// computation. False is hook_with_zero_step_interleaved: each bucket
	// is stepped as soon as its own reduction completes, while backward
	// still runs.
	Deferred bool
	// ClipValue, when positive, clamps every averaged gradient to
	// [-ClipValue, ClipValue] before the step, as ClipGradValue does
	// (torch's clip_grad_value_). A norm over all gradients cannot be
	// clipped here: no bucket waits for the others.
	ClipValue float64
	// ReduceToOwners is ZeRO stage 2's communication: each parameter's
	// gradient is reduced to its owner alone (pg.Rooted's Reduce, after
	// dividing by the ranks as commhook.Allreduce does) instead of
	// allreduced to every rank, so that a rank receives only the averages
	// it steps. The inner hook must be nil (commhook.Allreduce), and the
	// reducer's group a pg.Rooted. A backend's reduce may add in another
	// order than its allreduce: the results then agree to rounding, not to
	// the bit.
	ReduceToOwners bool
	// Timeline, if set, receives a "zero step" and a "zero broadcast"
	// event per bucket, on the bucket's lane (timeline.LaneBucket+index),
	// after the reducer's own events for it.
	Timeline *timeline.Writer
}

// ZeroHook is a comm hook that overlaps a Zero's step with backward, as
// torch's ddp_zero_hook does (see Note [ZeRO overlapped with backward]).
// It serves one reducer on one rank; make it with Zero.Hook and pass it as
// the reducer's hook.
type ZeroHook struct {
	z     *Zero
	inner commhook.Hook
	bcast pg.ProcessGroup
	o     ZeroHookOptions

	mu      sync.Mutex
	params  []pg.Tensor        // Begin's: the parameters' values, read while backward runs
	accum   int                // Begin's: what the gradients are divided by (accumulated micro-batches)
	armed   bool               // between Begin and Finish
	gen     int                // Begin's count: a bucket of an abandoned iteration records nothing in a later one
	stop    context.CancelFunc // ends the iteration's bucket Works (Abandon, Finish)
	done    context.Context    // ended by stop
	last    chan struct{}
	prev    *zeroTurn  // the previous bucket's turn to broadcast
	results []zeroSlot // every parameter seen this iteration, with its new value's place
	scratch map[int]pg.Tensor
}

// zeroSlot is where one parameter's new value lies after its bucket.
type zeroSlot struct {
	index int
	value pg.Tensor
}

// zeroTurn is one bucket's right to issue its broadcasts: done closes once
// it has issued them (or given up, err set).
type zeroTurn struct {
	done chan struct{}
	err  error
}

// Note [ZeRO overlapped with backward]: the reducer hands each bucket to
// the hook as soon as its gradients are ready, in bucket order. The hook
// runs the inner hook (the reduction, any comm hook) and returns a Work
// that finishes when the bucket's parameters are updated everywhere:
//
//  1. wait for the bucket's reduction (and, Deferred, for the last bucket
//     to have been launched);
//  2. for each parameter of the bucket this rank owns, step a copy of its
//     value (read while backward may still be reading it too: neither
//     writes it) with its averaged gradient, in a buffer of the owner's
//     (the size of the parameters it owns, in all);
//  3. broadcast every parameter of the bucket from its owner's buffer into
//     the gradient's place in the bucket on the other ranks: a non-owner's
//     averaged gradient of a parameter is never read;
//  4. once the iteration is over (the reducer has waited for every Work,
//     backward no longer reads the parameters), Finish copies every new
//     value into its parameter.
//
// The broadcasts go over a group of their own (Zero.Hook's bcast, for
// example a pg.Splitter's NewGroup of every rank), not the reducer's: a
// bucket's broadcasts are issued once its reduction completes, which on
// the reducer's group would interleave with later buckets' reductions
// differently on different ranks (the hang torch avoids by allowing the
// hook only on NCCL, pytorch#62300). On their own group they are issued in
// bucket order on every rank: each bucket waits for the previous one's
// turn. The step itself is the unsharded optimizer's, elementwise on the
// same averaged gradients, so the parameters end bitwise where Zero's
// Step (and the unsharded optimizer) would leave them.

// Hook returns a comm hook that runs inner (nil: commhook.Allreduce) for
// each bucket and then steps this rank's parameters in it, sending each
// bucket's parameters from their owners over bcast, a group of the same
// ranks in the same order as the Zero's group, used by nothing else.
// Every rank calls Begin before each synchronised backward and Finish
// after it; the reducer must be made with this hook, with every parameter
// used in every iteration (no FindUnusedParameters), and with buckets of
// the parameters' dtype (no MixedPrecision).
func (z *Zero) Hook(inner commhook.Hook, bcast pg.ProcessGroup, o ZeroHookOptions) (*ZeroHook, error) {
	switch {
	case bcast == nil:
		return nil, errors.New("optim: zero hook: no broadcast group; pass a group of the same ranks used by nothing " +
			"else (a pg.Splitter's NewGroup)")
	case bcast.Size() != z.g.Size() || bcast.Rank() != z.g.Rank():
		return nil, fmt.Errorf("optim: zero hook: the broadcast group is rank %d of %d, the optimizer's rank %d of %d; "+
			"it must hold the same ranks in the same order", bcast.Rank(), bcast.Size(), z.g.Rank(), z.g.Size())
	case o.ClipValue < 0:
		return nil, fmt.Errorf("optim: zero hook: ClipValue %v; want 0 (off) or more", o.ClipValue)
	}
	if o.ReduceToOwners && inner != nil {
		if _, ok := inner.(commhook.Allreduce); !ok {
			return nil, fmt.Errorf("optim: zero hook: ReduceToOwners replaces the reduction, so it cannot run the %q "+
				"comm hook; pass no inner hook", commhook.Name(inner))
		}
	}
	if inner == nil {
		inner = commhook.Allreduce{}
	}
	return &ZeroHook{z: z, inner: inner, bcast: bcast, o: o, scratch: map[int]pg.Tensor{}}, nil
}

// Name is "zero(<inner>)".
func (h *ZeroHook) Name() string { return "zero(" + commhook.Name(h.inner) + ")" }

// Inner returns the hook that reduces each bucket, for its state.
func (h *ZeroHook) Inner() commhook.Hook { return h.inner }

// Begin arms the hook for the next synchronised backward: params are the
// parameters' values (ddp.DDP.ParamTensors), in the Zero's order, and
// accum what the averaged gradients are divided by before the step (the
// micro-batches accumulated into them; 1 for none). Set the learning rate
// with the Zero's SetLR before Begin.
func (h *ZeroHook) Begin(params []pg.Tensor, accum int) error {
	if err := h.z.checkParams(params); err != nil {
		return err
	}
	if accum < 1 {
		return fmt.Errorf("optim: zero hook: accumulation %d; want 1 or more", accum)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.armed {
		return errors.New("optim: zero hook: Begin twice without Finish")
	}
	h.params, h.accum, h.armed, h.last, h.prev, h.results = params, accum, true, make(chan struct{}), nil, nil
	h.gen++
	h.done, h.stop = context.WithCancel(context.Background())
	return nil
}

// Finish ends the iteration Begin armed: it copies every parameter's new
// value into the parameter and counts the Zero's step. Call it after the
// reducer has finished the iteration without error (ddp.DDP.RunAll
// returned nil) and before the next forward. After a failed iteration call
// Abandon instead.
func (h *ZeroHook) Finish() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.armed {
		return errors.New("optim: zero hook: Finish without Begin")
	}
	if len(h.results) != len(h.params) {
		h.armed = false
		return fmt.Errorf("optim: zero hook: the iteration's buckets held %d of the %d parameters; ZeRO's overlap needs "+
			"every parameter in every iteration (no unused parameters)", len(h.results), len(h.params))
	}
	for _, s := range h.results {
		copy(h.params[s.index].Data, s.value.Data)
	}
	h.armed, h.results = false, nil
	h.stop()
	h.z.step++
	return nil
}

// Abandon disarms the hook after a failed iteration; nothing is copied.
// Some owners may have stepped their state already: resume from a
// checkpoint.
func (h *ZeroHook) Abandon() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.results = false, nil
	if h.stop != nil {
		h.stop() // a bucket still waiting (for the last bucket, say) gives up now, not at its timeout
	}
}

// Run is the hook: see Note [ZeRO overlapped with backward].
func (h *ZeroHook) Run(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
	h.mu.Lock()
	if !h.armed {
		h.mu.Unlock()
		return pg.Completed(errors.New("optim: zero hook: a bucket arrived without Begin; call Begin before every " +
			"synchronised backward"))
	}
	prev, mine := h.prev, &zeroTurn{done: make(chan struct{})}
	h.prev = mine
	last, params, accum, gen, done := h.last, h.params, h.accum, h.gen, h.done
	if b.IsLast {
		close(h.last)
	}
	h.mu.Unlock()
	if err := h.check(b, params); err != nil {
		mine.pass(err)
		return pg.Completed(err)
	}
	var w pg.Work
	if h.o.ReduceToOwners {
		w = h.reduceToOwners(ctx, g, b)
	} else {
		w = h.inner.Run(ctx, g, b)
	}
	f := pg.NewFuture()
	go func() {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(done, cancel)()
		f.Complete(h.bucket(ctx, b, w, bucketRun{params, accum, gen, last}, prev, mine))
	}()
	return f
}

// reduceToOwners starts ZeRO-2's reduction of b: the bucket divided as
// commhook.Allreduce divides it, then each parameter summed into its
// owner's copy.
func (h *ZeroHook) reduceToOwners(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
	var rooted pg.Rooted
	if !pg.As(g, &rooted) {
		return pg.Completed(fmt.Errorf("optim: zero hook: ReduceToOwners needs a group with Reduce (pg.Rooted); the %s "+
			"group has none", pg.BackendName(g)))
	}
	n := g.Size()
	if b.Divisor > 0 {
		n = b.Divisor
	}
	if err := commhook.Divide(b.Buffer, n); err != nil {
		return pg.Completed(err)
	}
	works := make([]pg.Work, len(b.Params))
	for j, p := range b.Params {
		works[j] = rooted.Reduce(ctx, b.Gradient(j), h.z.owners[p.Index], pg.Op(pg.Sum))
	}
	f := pg.NewFuture()
	go func() { f.Complete(pg.WaitAll(ctx, works...)) }()
	return f
}

// check refuses a bucket the hook cannot step.
func (h *ZeroHook) check(b *commhook.GradBucket, params []pg.Tensor) error {
	if b.Buffer.Device != nil {
		return fmt.Errorf("optim: zero hook: bucket %d is in device memory; the optimizers of this package step on "+
			"the host, so ZeRO's overlap needs host buckets (train without the overlap, or with host buckets)", b.Index)
	}
	for _, p := range b.Params {
		if p.Index < 0 || p.Index >= len(params) {
			return fmt.Errorf("optim: zero hook: bucket %d holds parameter %d, but the optimizer has %d", b.Index, p.Index,
				len(params))
		}
		if d := params[p.Index].Dtype; d != b.Buffer.Dtype {
			return fmt.Errorf("optim: zero hook: bucket %d is %v but parameter %d (%s) is %v; ZeRO's overlap writes the "+
				"new parameters into the bucket and needs buckets of the parameters' dtype (no MixedPrecision)",
				b.Index, b.Buffer.Dtype, p.Index, p.Name, d)
		}
	}
	return nil
}

// bucketRun is what a bucket's Work takes from the iteration Begin armed.
type bucketRun struct {
	params []pg.Tensor
	accum  int
	gen    int
	last   chan struct{}
}

// bucket is one bucket's Work: reduction, step, broadcasts.
func (h *ZeroHook) bucket(ctx context.Context, b *commhook.GradBucket, w pg.Work, it bucketRun, prev,
	mine *zeroTurn) error {
	err := w.Wait(ctx)
	if err == nil && h.o.Deferred {
		err = waitChan(ctx, it.last, "the iteration's last bucket")
	}
	if err == nil {
		start := time.Now()
		var owned int
		owned, err = h.stepBucket(b, it.params, it.accum)
		h.event("zero step", b.Index, start, timeline.Arg{Key: "params_stepped", Value: int64(owned)})
	}
	if err == nil {
		err = prev.wait(ctx)
	}
	if err != nil {
		mine.pass(err)
		return err
	}
	start := time.Now()
	works, owners := make([]pg.Work, len(b.Params)), make([]int, len(b.Params))
	values := make([]pg.Tensor, len(b.Params))
	for j, p := range b.Params {
		owners[j], values[j] = h.z.owners[p.Index], b.Gradient(j)
		if h.z.Owns(p.Index) {
			values[j] = h.scratchFor(p.Index, values[j])
		}
		works[j] = h.bcast.Broadcast(ctx, values[j], owners[j])
	}
	h.place(values, b, it.gen)
	mine.pass(nil)
	err = waitAll(ctx, works, "broadcasting bucket parameter %d from rank %d", owners)
	h.event("zero broadcast", b.Index, start, timeline.Arg{Key: "bytes", Value: int64(len(b.Buffer.Data))})
	if err != nil {
		return fmt.Errorf("bucket %d: %w", b.Index, err)
	}
	return finiteAfter(b, values)
}

// place records where each parameter of b will hold its new value once
// the broadcasts end: its owner's step buffer, or the gradient's place in
// the bucket.
func (h *ZeroHook) place(values []pg.Tensor, b *commhook.GradBucket, gen int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if gen != h.gen || !h.armed {
		return // an abandoned iteration's
	}
	for j, p := range b.Params {
		h.results = append(h.results, zeroSlot{index: p.Index, value: values[j]})
	}
}

// event writes one of a bucket's events to the timeline, if there is one.
func (h *ZeroHook) event(name string, bucket int, start time.Time, arg timeline.Arg) {
	if h.o.Timeline == nil {
		return
	}
	h.o.Timeline.Write(&timeline.Event{Name: name, Lane: timeline.LaneBucket + bucket, Start: start, End: time.Now(),
		Args: [3]timeline.Arg{{Key: "bucket", Value: int64(bucket)}, arg}})
}

// finiteAfter refuses a bucket whose new parameters are not all finite:
// an averaged gradient that was not (stepBucket), or a step that
// overflowed. Every rank holds the same values, so every rank refuses.
func finiteAfter(b *commhook.GradBucket, values []pg.Tensor) error {
	for j, p := range b.Params {
		if !reducer.Finite(values[j]) {
			return fmt.Errorf("optim: zero hook: %w: the averaged gradient of parameter %d (%s), bucket %d, or its new "+
				"value; with ZeRO's overlap a step cannot be skipped once other buckets have been stepped: resume from a "+
				"checkpoint with a lower rate, or train without the overlap", reducer.ErrNonFinite, p.Index, p.Name, b.Index)
		}
	}
	return nil
}

// fillNaN writes NaN into every element of a float32 or float64 tensor.
func fillNaN(t pg.Tensor) {
	switch t.Dtype {
	case pg.Float32:
		nan := float32(math.NaN())
		v := pg.View[float32](t)
		for i := range v {
			v[i] = nan
		}
	case pg.Float64:
		v := pg.View[float64](t)
		for i := range v {
			v[i] = math.NaN()
		}
	}
}

// stepBucket steps this rank's parameters of b, each into its gradient's
// place in the bucket.
// A parameter whose averaged gradient is not finite is not stepped: its
// owner sends NaN in its place, so that every rank, whether it received
// the average or not (ReduceToOwners), fails at the same bucket after the
// broadcasts (finiteAfter), and none waits for a broadcast that will not
// come.
func (h *ZeroHook) stepBucket(b *commhook.GradBucket, params []pg.Tensor, accum int) (owned int, err error) {
	for j, p := range b.Params {
		in, ok := h.z.inner[p.Index]
		if !ok {
			continue
		}
		owned++
		grad, next := b.Gradient(j), h.scratchFor(p.Index, b.Gradient(j))
		if !reducer.Finite(grad) {
			fillNaN(next)
			continue
		}
		if accum > 1 {
			if err := commhook.Divide(grad, accum); err != nil {
				return owned, err
			}
		}
		if h.o.ClipValue > 0 {
			if err := ClipGradValue([]pg.Tensor{grad}, h.o.ClipValue); err != nil {
				return owned, err
			}
		}
		copy(next.Data, params[p.Index].Data)
		if err := in.Step([]pg.Tensor{next}, []pg.Tensor{grad}); err != nil {
			return owned, fmt.Errorf("%w (parameter %d)", err, p.Index)
		}
	}
	return owned, nil
}

// scratchFor is where parameter i's new value is stepped, on its owner,
// made once: the size of the parameters this rank owns, in all.
func (h *ZeroHook) scratchFor(i int, like pg.Tensor) pg.Tensor {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.scratch[i]
	if !ok || s.Dtype != like.Dtype || s.Len() != like.Len() {
		s = pg.NewTensor(like.Dtype, like.Len())
		h.scratch[i] = s
	}
	return s
}

// pass hands the turn on; err non-nil means the bucket gave up.
func (t *zeroTurn) pass(err error) {
	t.err = err
	close(t.done)
}

// wait blocks until the previous bucket t has issued its broadcasts.
func (t *zeroTurn) wait(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := waitChan(ctx, t.done, "the previous bucket's broadcasts"); err != nil {
		return err
	}
	if t.err != nil {
		return fmt.Errorf("optim: zero hook: an earlier bucket failed: %w", t.err)
	}
	return nil
}

// waitChan waits for c to close or ctx to end.
func waitChan(ctx context.Context, c <-chan struct{}, what string) error {
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("optim: zero hook: waiting for %s: %w", what, context.Cause(ctx))
	}
}
