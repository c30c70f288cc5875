package reducer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"go.uber.org/zap"
)

// Reducer averages gradients across the ranks of a process group, bucket
// by bucket, while backward is still running. It is c10d's Reducer.
//
// One iteration is:
//
//	r.Prepare(ctx, reducer.Iteration{Sync: true})  // before backward
//	... r.MarkReady(i, grad) from each gradient hook, as backward runs ...
//	r.Finalize(ctx)                                // after backward
//
// after which every gradient passed to MarkReady holds the average over
// ranks (or, with a custom hook, whatever the hook produced).
//
// MarkReady may be called from a goroutine other than the one calling
// Prepare and Finalize (Gorgonia's TapeMachine runs hooks on its own), and
// from several at once, but calls must not overlap Prepare or Finalize.
//
// Inside, a pure state machine decides (machine.go, Note [events in,
// actions out]) and the Reducer performs what it decides, never holding
// its lock across a wait, a comm hook, a device copy or an observer call.
type Reducer struct {
	g      pg.ProcessGroup
	opts   Options
	params []Param
	// per parameter, its gradients' and bucket's dtype (MixedPrecision.ParamDtype when on; Param.Dtype is the values')
	dtypes []pg.Dtype
	numel  []int
	log    *zap.Logger

	// mu guards the fields below, and only for bookkeeping: it is never
	// held across a wait, a hook, a device copy or an observer call.
	mu      sync.Mutex
	m       *machine // every decision: machine.go
	hook    commhook.Hook
	layout  *layout
	started bool // the first Prepare has run; hooks can no longer change

	iter     iterCtx     // Note [iteration context]
	dst      []pg.Tensor // gradients to write results back into
	usedMap  pg.Tensor   // int32 per parameter, over m.used: the tensor the used map is allreduced in
	usedWork pg.Work     // StaticGraph's first iteration: the used map's allreduce, started before the buckets
	spans    []memSpan   // scratch of checkDisjoint: Note [one memory per result]

	queue, spare []action // MarkReady's actions, performed in order by one goroutine: see drain
	preparing    []action // Prepare's actions: its own buffer, which the machine appends to
	finishing    []action // Finalize's, likewise
	draining     bool
	fin          finishState // what Finalize's actions hand to each other: iteration.go

	tr   transport   // host, mixed precision or device buckets: transport.go
	host hostBuffers // host buckets in the group's memory: hostbuf.go

	origin originState // FindNonFiniteOrigin's findings: origin.go

	divisor int // what the default allreduce divides by under a Join; 0: the world size (uneven.go)

	copies copyCounters // see view.go; atomic, read without the lock
	obs    observer     // metrics, logging data and timeline: see observe.go
}

// iterCtx is what an iteration's actions run with.
type iterCtx struct {
	ctx     context.Context // see Note [iteration context]
	divisor int             // Join's divisor for this iteration; 0: the world size
}

// Note [iteration context]: gradient hooks fire inside Gorgonia's
// RunAll, which has no context to give them, yet the collectives they
// launch must be bounded. Prepare's ctx is therefore kept for the length
// of one iteration, and only for it: Finalize drops it.

// New builds a reducer for params over g. It checks with every other rank
// that they all hold the same model (same number of parameters, same
// shapes and dtypes), then plans the buckets. It is collective: every rank
// must call it.
func New(ctx context.Context, g pg.ProcessGroup, params []Param, opts Options) (*Reducer, error) {
	if err := backend.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("reducer: New: %w", err)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Reducer{g: g, opts: opts, params: params, log: opts.Logger.With(zap.Int("rank", g.Rank())), obs: nopObserver{}}
	if err := r.describe(); err != nil {
		return nil, err
	}
	if err := verifyModel(ctx, g, params); err != nil {
		return nil, err
	}
	order := make([]int, len(params))
	for i := range order {
		order[i] = i
	}
	plan, limits, err := r.assign(order, opts.initialLimits(), false)
	if err != nil {
		return nil, err
	}
	r.initHostBuffers() // hostbuf.go
	r.layout = r.newLayout(plan, limits)
	used := make([]int32, len(params))
	r.initOrigin() // origin.go
	r.dst = make([]pg.Tensor, len(params))
	r.usedMap = pg.Int32s(used)
	r.hook = opts.Hook
	if r.hook == nil {
		r.hook = commhook.Allreduce{}
	}
	r.tr = newTransport(r) // transport.go
	r.m = newMachine(params, r.dtypes, g.Rank(), opts, plan, used, !r.tr.hostOnly())
	if err := r.observe(); err != nil { // logs "DDP initialized"; see observe.go
		return nil, fmt.Errorf("reducer: observability: %w", err)
	}
	return r, nil
}

// describe checks the parameters and derives their dtypes and sizes.
func (r *Reducer) describe() error {
	if len(r.params) == 0 {
		return errors.New("reducer: DDP is not needed when a model has no parameter that requires a gradient")
	}
	r.dtypes = make([]pg.Dtype, len(r.params))
	r.numel = make([]int, len(r.params))
	for i, p := range r.params {
		if p.Dtype != pg.Float32 && p.Dtype != pg.Float64 {
			return fmt.Errorf("reducer: parameter %d (%s) has dtype %v; DDP reduces float32 or float64 parameters", i, p.Name,
				p.Dtype)
		}
		r.dtypes[i], r.numel[i] = p.Dtype, p.Numel()
		if mp := r.opts.MixedPrecision; mp != nil {
			r.dtypes[i] = mp.ParamDtype // gradients and buckets: see MixedPrecision
		}
	}
	return nil
}

// RegisterCommHook replaces the default allreduce hook. It can be called
// once, before the first Prepare.
func (r *Reducer) RegisterCommHook(h commhook.Hook) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.m.status().usable(); err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("%w: the hook is nil", ErrHookRegistration)
	}
	if r.opts.Hook != nil || r.started || r.opts.MixedPrecision != nil {
		return fmt.Errorf("%w (hook %q is already in use; register it once, after New and before training)",
			ErrHookRegistration, commhook.Name(r.hook))
	}
	r.hook, r.opts.Hook = h, h
	return nil
}

// GloballyUnused reports, per parameter, whether no rank produced a
// gradient for it in the last synchronised iteration (its accumulation
// window included): c10d's global_unused. Such a parameter's gradient is
// left untouched by Finalize, as torch leaves its grad; every other
// parameter's result is the reduced gradient, also on the ranks that did
// not use it (read it with Gradient). nil means every parameter was used,
// which is always so without FindUnusedParameters or StaticGraph. With
// StaticGraph the set is the first iteration's. The slice is a copy.
func (r *Reducer) GloballyUnused() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u := r.m.status().globalUnused; u != nil {
		return slices.Clone(u)
	}
	return nil
}

// Buckets returns the current bucket plan: parameter indices per bucket,
// in launch order.
func (r *Reducer) Buckets() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.layout.plan()
}

// Gradient returns the reduced gradient of parameter i as it stands in its
// bucket: after Finalize, the result for i. It is how a caller reads the
// result for a parameter that got no local gradient (and so had nowhere
// to write it back). It is valid until the next Prepare. With
// MixedPrecision it is the result cast to the parameter's own dtype, a
// tensor the reducer keeps for the whole run.
func (r *Reducer) Gradient(i int) pg.Tensor {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tr.result(i)
}

// DeviceBuckets reports, per bucket, how its device twin is registered
// ("window", "register", "none"), or nil when the buckets are on the host
// only.
func (r *Reducer) DeviceBuckets() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tr.registrations()
}

// Close releases what the reducer holds beyond Go memory: its device
// buckets and their NCCL registrations. The reducer is unusable after it.
// It does not close the process group.
func (r *Reducer) Close() error {
	r.mu.Lock()
	_, _ = r.m.step(evFail{err: errors.New("reducer: closed")}, nil)
	r.mu.Unlock()
	if err := r.tr.close(); err != nil {
		return fmt.Errorf("reducer: releasing device buckets: %w", err)
	}
	if err := r.closeHostBuffers(); err != nil {
		return fmt.Errorf("reducer: returning host buckets to the process group: %w", err)
	}
	return nil
}
