package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/ddp/pg"
)

// ZeroOptions configure NewZero.
type ZeroOptions struct {
	// Timeout bounds the collectives of a Step (which takes no context);
	// zero means pg.DefaultTimeout. StepContext and Consolidate are bounded
	// by their context instead.
	Timeout time.Duration
}

// Zero is ZeRO stage 1 (Rajbhandari et al. 2020) as torch 1.13's
// ZeroRedundancyOptimizer does it: the parameters are partitioned among
// the group's ranks by Partition, each rank keeps the optimizer state of
// its own parameters only and steps only them, and every updated
// parameter then reaches every rank, broadcast from its owner as torch's
// _sync_params does. Every rank must call Step with the same averaged
// gradients (ddp.DDP's); the parameters then end bitwise where the
// unsharded optimizer would leave them, since every rule of this package
// is elementwise.
//
// Zero is an Optimizer whose State is this rank's shard, keyed by the
// parameters' indices in the whole model; Consolidate gathers the whole
// state, in the format of the unsharded optimizer, for a checkpoint. Load
// takes either, and keeps the entries of this rank's parameters, so a
// consolidated state resumes at any world size, sharded or not. A Zero is
// not safe for concurrent use; all of its ranks call Step, StepContext and
// Consolidate together.
type Zero struct {
	g       pg.ProcessGroup
	name    string
	o       Options
	sizes   []int
	owners  []int
	inner   map[int]Optimizer // per owned parameter, an optimizer over that parameter alone
	kinds   []string          // the state buffers the optimizer keeps per parameter
	step    int
	lr, lr0 float64
	timeout time.Duration
}

// NewZero returns a Zero over g for parameters of sizes[i] elements, with
// the optimizer NewWith(name, o, ·) would make.
func NewZero(g pg.ProcessGroup, name string, o Options, sizes []int, zo ZeroOptions) (*Zero, error) {
	if g == nil {
		return nil, errors.New("optim: NewZero: no process group")
	}
	probe, err := NewWith(name, o, max(len(sizes), 1))
	if err != nil {
		return nil, err
	}
	if len(sizes) == 0 {
		return nil, errors.New("optim: NewZero: no parameters")
	}
	owners, err := Partition([][]int{sizes}, g.Size())
	if err != nil {
		return nil, err
	}
	z := &Zero{g: g, name: name, o: o, sizes: append([]int(nil), sizes...), owners: owners[0],
		inner: map[int]Optimizer{}, kinds: baseOf(probe).kinds, lr: probe.LR(), lr0: probe.LR(),
		timeout: zo.Timeout}
	if z.timeout <= 0 {
		z.timeout = pg.DefaultTimeout
	}
	for i, r := range z.owners {
		if r == g.Rank() {
			if z.inner[i], err = NewWith(name, o, 1); err != nil {
				return nil, err
			}
		}
	}
	return z, nil
}

// baseOf returns the state every optimizer of this package shares.
func baseOf(o Optimizer) *base {
	switch v := o.(type) {
	case *sgd:
		return &v.base
	case *adam:
		return &v.base
	}
	panic(fmt.Sprintf("optim: unknown optimizer %T", o)) // NewWith makes no other
}

// Owners returns each parameter's owner rank, a copy.
func (z *Zero) Owners() []int { return append([]int(nil), z.owners...) }

// Owns reports whether this rank holds parameter i's state.
func (z *Zero) Owns(i int) bool { _, ok := z.inner[i]; return ok }

func (z *Zero) Name() string { return z.name }

func (z *Zero) LR() float64 { return z.lr }

func (z *Zero) SetLR(lr float64) error {
	if err := checkLR(lr); err != nil {
		return err
	}
	for _, in := range z.inner {
		if err := in.SetLR(lr); err != nil {
			return err
		}
	}
	z.lr = lr
	return nil
}

// Step is StepContext bounded by ZeroOptions.Timeout.
func (z *Zero) Step(params, grads []pg.Tensor) error {
	ctx, cancel := context.WithTimeout(context.Background(), z.timeout)
	defer cancel()
	return z.StepContext(ctx, params, grads)
}

// StepContext steps this rank's parameters with their gradients and then
// broadcasts every parameter from its owner. It is collective: every rank
// calls it with the same gradients. params and grads are as Optimizer's
// Step takes them; the gradients of the parameters other ranks own are not
// read.
func (z *Zero) StepContext(ctx context.Context, params, grads []pg.Tensor) error {
	if len(grads) != len(z.sizes) {
		return fmt.Errorf("optim: zero %s.Step: %d gradients, but the optimizer was made for %d parameters",
			z.name, len(grads), len(z.sizes))
	}
	if err := z.checkParams(params); err != nil {
		return err
	}
	for i, in := range z.inner {
		if err := in.Step(params[i:i+1], grads[i:i+1]); err != nil {
			return fmt.Errorf("%w (parameter %d)", err, i)
		}
	}
	z.step++
	return z.SyncParams(ctx, params)
}

// checkParams refuses parameters the optimizer was not made for.
func (z *Zero) checkParams(params []pg.Tensor) error {
	if len(params) != len(z.sizes) {
		return fmt.Errorf("optim: zero %s: %d parameters, but the optimizer was made for %d", z.name, len(params),
			len(z.sizes))
	}
	for i, p := range params {
		if p.Len() != z.sizes[i] {
			return fmt.Errorf("optim: zero %s: parameter %d has %d values, but the optimizer was made for %d", z.name,
				i, p.Len(), z.sizes[i])
		}
	}
	return nil
}

// SyncParams broadcasts every parameter from its owner, all in flight at
// once, and waits for them: torch's _sync_params. It is collective.
func (z *Zero) SyncParams(ctx context.Context, params []pg.Tensor) error {
	works := make([]pg.Work, len(params))
	for i, p := range params {
		works[i] = z.g.Broadcast(ctx, p, z.owners[i])
	}
	return waitAll(ctx, works, "broadcasting parameter %d from rank %d", z.owners)
}

// waitAll waits for every work and returns the first failure, described
// by format with the work's index and owner.
func waitAll(ctx context.Context, works []pg.Work, format string, owners []int) error {
	var first error
	for i, w := range works {
		if err := w.Wait(ctx); err != nil && first == nil {
			first = fmt.Errorf("optim: zero: "+format+": %w", i, owners[i], err)
		}
	}
	return first
}

// State returns this rank's shard: its parameters' buffers and step
// counts, keyed by their indices in the whole model.
func (z *Zero) State() State {
	s := State{Name: z.name, Step: z.step, Buffers: map[string][]float64{}}
	if math.Float64bits(z.lr) != math.Float64bits(z.lr0) {
		s.Buffers[lrKey] = []float64{z.lr}
	}
	for i, in := range z.inner {
		for key, v := range in.State().Buffers {
			kind, _, _ := strings.Cut(key, "/")
			if kind != lrKey {
				s.Buffers[kind+"/"+strconv.Itoa(i)] = v
			}
		}
	}
	return s
}

// Load takes a whole state (an unsharded optimizer's, or Consolidate's)
// or a shard, checks all of it against the model, and keeps the entries
// of this rank's parameters.
func (z *Zero) Load(s State) error {
	probe, err := NewWith(z.name, z.o, len(z.sizes))
	if err != nil {
		return err
	}
	if err := baseOf(probe).load(s, false); err != nil {
		return err
	}
	parts := map[int]State{}
	for i := range z.inner {
		parts[i] = State{Name: s.Name, Step: s.Step, Buffers: map[string][]float64{}}
		if v, ok := s.Buffers[lrKey]; ok {
			parts[i].Buffers[lrKey] = v
		}
	}
	for key, v := range s.Buffers {
		kind, idx, ok := strings.Cut(key, "/")
		i, _ := strconv.Atoi(idx)
		if part, mine := parts[i]; ok && mine {
			if len(v) != 1 && kind == stepKey || kind != stepKey && len(v) != z.sizes[i] {
				return fmt.Errorf("optim: state %s has %d values but parameter %d has %d; the state is from another model",
					key, len(v), i, z.sizes[i])
			}
			part.Buffers[kind+"/0"] = v
		}
	}
	for i, part := range parts {
		if err := z.inner[i].Load(part); err != nil {
			return fmt.Errorf("%w (parameter %d)", err, i)
		}
	}
	z.step, z.lr = s.Step, baseOf(probe).lr
	return nil
}

// StateBytes is the memory this rank's optimizer state takes: its
// parameters' buffers, in their dtypes.
func (z *Zero) StateBytes() int64 {
	var n int64
	for _, in := range z.inner {
		n += stateBytes(in)
	}
	return n
}

// StateBytes is the memory opt's per-parameter buffers take, in their
// dtypes; for a Zero, this rank's share.
func StateBytes(opt Optimizer) int64 {
	if z, ok := opt.(*Zero); ok {
		return z.StateBytes()
	}
	return stateBytes(opt)
}

func stateBytes(opt Optimizer) int64 {
	var n int64
	for _, bufs := range baseOf(opt).bufs {
		for _, b := range bufs {
			n += int64(len(b.Data))
		}
	}
	return n
}

// Consolidate returns the whole optimizer state on every rank, in the
// format of the unsharded optimizer (torch's consolidate_state_dict, which
// gathers to one rank): each rank's shard broadcast from its owner, after
// one allreduce that tells every rank which buffers exist and each
// parameter's step count. It is collective.
func (z *Zero) Consolidate(ctx context.Context) (State, error) {
	width := 1 + len(z.kinds)
	meta := make([]float64, len(z.sizes)*width) // per parameter: its step count, then 1 per buffer it has
	shard := z.State()
	for i := range z.inner {
		meta[i*width] = float64(z.step)
		if v, ok := shard.Buffers[stepKey+"/"+strconv.Itoa(i)]; ok {
			meta[i*width] = v[0]
		}
		for k, kind := range z.kinds {
			if _, ok := shard.Buffers[kind+"/"+strconv.Itoa(i)]; ok {
				meta[i*width+1+k] = 1
			}
		}
	}
	if err := z.g.AllReduce(ctx, pg.Float64s(meta), pg.ReduceOp{}).Wait(ctx); err != nil {
		return State{}, fmt.Errorf("optim: zero: consolidating the optimizer state: %w", err)
	}
	s := State{Name: z.name, Step: z.step, Buffers: map[string][]float64{}}
	if v, ok := shard.Buffers[lrKey]; ok {
		s.Buffers[lrKey] = v
	}
	var works []pg.Work
	var owners []int
	for i, n := range z.sizes {
		if steps := int(meta[i*width]); steps != z.step {
			s.Buffers[stepKey+"/"+strconv.Itoa(i)] = []float64{float64(steps)}
		}
		for k, kind := range z.kinds {
			if meta[i*width+1+k] == 0 {
				continue
			}
			key := kind + "/" + strconv.Itoa(i)
			buf := shard.Buffers[key]
			if buf == nil {
				buf = make([]float64, n)
			}
			s.Buffers[key] = buf
			works = append(works, z.g.Broadcast(ctx, pg.Float64s(buf), z.owners[i]))
			owners = append(owners, z.owners[i])
		}
	}
	if err := waitAll(ctx, works, "consolidating state buffer %d from rank %d", owners); err != nil {
		return State{}, err
	}
	return s, nil
}
