package optim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/pg"
	"gorgonia.org/gorgonia"
)

// Optimizer updates parameters in place from their gradients.
//
// Step takes the parameters' and gradients' memory as float32 or float64
// tensors (views, as gtensor.TensorOf gives, or NodeTensors), the same
// list in the same order on every call, params[i] and grads[i] of one
// dtype and length. It reads the gradients and never writes them. A
// gradient with nil Data is no gradient, torch's None: that parameter and
// its state are left as they are, and its step count does not advance
// (ddp.DDP.StepTensors gives one for a parameter no rank has used yet). An
// Optimizer is not safe for concurrent use.
type Optimizer interface {
	Step(params, grads []pg.Tensor) error
	// State returns a deep copy of everything Step depends on, for a
	// checkpoint.
	State() State
	// Load replaces the optimizer's state with a copy of s, so that the
	// next Step continues the run s was taken from exactly.
	Load(s State) error
	// Name is the name New takes: one of Names.
	Name() string
	// LR is the learning rate the next Step uses.
	LR() float64
	// SetLR sets the learning rate of the following Steps, as assigning
	// torch's param_group["lr"] does; a schedule calls it between steps.
	// It takes a finite rate >= 0.
	SetLR(lr float64) error
}

// State is an optimizer's state. Buffers are keyed "<kind>/<param
// index>": "momentum/3" for SGD with momentum, "exp_avg/3" and
// "exp_avg_sq/3" for Adam (PyTorch's names). A float32 run's buffers hold
// float32 values, which float64 represents exactly. A parameter that was
// skipped in some steps (no gradient) has its own step count, "step/3"
// (one value), as torch keeps state["step"] per parameter; the others'
// is Step. A rate set with SetLR that differs from the one the optimizer
// was made with is kept as "lr" (one value), so Load restores it.
type State struct {
	Name    string // the optimizer's Name; Load checks it when it is set
	Step    int    // steps taken (Step calls)
	Buffers map[string][]float64
}

// Names lists the optimizers New makes.
func Names() []string { return []string{"sgd", "momentum", "adam", "adamw"} }

// NodeTensors views each node's value and gradient as tensors for Step,
// without copying: Step writes the values in place. Call it after each
// RunAll (the machine allocates new gradients on every run after Reset)
// and before Reset. With DDP, after ddp.DDP.RunAll the gradients hold
// the average over ranks.
func NodeTensors(nodes gorgonia.Nodes) (params, grads []pg.Tensor, err error) {
	params, grads = make([]pg.Tensor, len(nodes)), make([]pg.Tensor, len(nodes))
	for i, n := range nodes {
		if params[i], err = gtensor.TensorOf(n.Value()); err != nil {
			return nil, nil, fmt.Errorf("optim: parameter %d (%s): %w", i, n.Name(), err)
		}
		g, err := n.Grad()
		if err != nil || g == nil {
			return nil, nil, fmt.Errorf("optim: parameter %d (%s) has no gradient; run the graph (RunAll) before stepping, on "+
				"a graph whose loss uses every parameter", i, n.Name())
		}
		if grads[i], err = gtensor.TensorOf(g); err != nil {
			return nil, nil, fmt.Errorf("optim: gradient of parameter %d (%s): %w", i, n.Name(), err)
		}
	}
	return params, grads, nil
}

// New returns the optimizer called name, with learning rate lr, for
// numParams parameters, with PyTorch's defaults: momentum 0.9 for
// "momentum"; β1 0.9, β2 0.999 and ε 1e-8 for "adam" and "adamw"; weight
// decay 0.01 for "adamw" (decoupled, as torch's AdamW) and none for the
// others; no dampening or Nesterov. NewWith takes every hyperparameter.
func New(name string, lr float64, numParams int) (Optimizer, error) {
	return NewWith(name, Options{LR: &lr}, numParams)
}

// base holds what every optimizer shares: its step count and its
// per-parameter buffers, bufs[kind][param], each in its parameter's dtype
// (or float64 after Load, until the next Step converts it). A buffer with
// no Data does not exist yet.
type base struct {
	name  string
	lr    float64 // the rate of the next Step
	lr0   float64 // the rate the optimizer was made with
	n     int
	step  int   // Step calls
	steps []int // per parameter: the Steps that updated it (it had a gradient)
	kinds []string
	bufs  [][]pg.Tensor
}

// stepKey keys a parameter's own step count in State.Buffers, lrKey a
// rate set with SetLR.
const (
	stepKey = "step"
	lrKey   = "lr"
)

func newBase(name string, lr float64, n int, kinds ...string) base {
	b := base{name: name, lr: lr, lr0: lr, n: n, steps: make([]int, n), kinds: kinds,
		bufs: make([][]pg.Tensor, len(kinds))}
	for k := range b.bufs {
		b.bufs[k] = make([]pg.Tensor, n)
	}
	return b
}

func (b *base) Name() string { return b.name }

func (b *base) LR() float64 { return b.lr }

func (b *base) SetLR(lr float64) error {
	if err := checkLR(lr); err != nil {
		return err
	}
	b.lr = lr
	return nil
}

func checkLR(lr float64) error {
	if math.IsNaN(lr) || math.IsInf(lr, 0) || lr < 0 {
		return fmt.Errorf("optim: learning rate %v: want a finite number >= 0", lr)
	}
	return nil
}

// check validates a Step's arguments against each other and the state,
// and converts loaded buffers to their parameter's dtype.
func (b *base) check(params, grads []pg.Tensor) error {
	if len(params) != b.n || len(grads) != b.n {
		return fmt.Errorf("optim: %s.Step: %d parameters and %d gradients, but the optimizer was made for %d", b.name,
			len(params), len(grads), b.n)
	}
	for i, p := range params {
		g := grads[i]
		switch {
		case p.Dtype != pg.Float32 && p.Dtype != pg.Float64:
			return fmt.Errorf("optim: parameter %d is %v; want float32 or float64", i, p.Dtype)
		case g.Data == nil:
			continue // no gradient: skipped
		case g.Dtype != p.Dtype || g.Len() != p.Len():
			return fmt.Errorf("optim: parameter %d is %d %v values but its gradient is %d %v values", i, p.Len(), p.Dtype,
				g.Len(), g.Dtype)
		case p.Validate() != nil || g.Validate() != nil:
			return fmt.Errorf("optim: parameter %d: %w", i, errFirst(p.Validate(), g.Validate()))
		}
		for k, kind := range b.kinds {
			buf := b.bufs[k][i]
			if buf.Data == nil {
				continue
			}
			if buf.Len() != p.Len() {
				return fmt.Errorf("optim: state %s/%d has %d values but parameter %d has %d; the state is from another model", kind,
					i, buf.Len(), i, p.Len())
			}
			b.bufs[k][i] = convert(buf, p.Dtype)
		}
	}
	return nil
}

func errFirst(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// convert returns t in dtype d: t itself, or a rounded copy.
func convert(t pg.Tensor, d pg.Dtype) pg.Tensor {
	if t.Dtype == d {
		return t
	}
	out := pg.NewTensor(d, t.Len())
	if d == pg.Float32 {
		dst := pg.View[float32](out)
		for k, v := range toFloat64s(t) {
			dst[k] = float32(v)
		}
		return out
	}
	copy(pg.View[float64](out), toFloat64s(t))
	return out
}

// toFloat64s returns a float64 copy of a float32 or float64 tensor.
func toFloat64s(t pg.Tensor) []float64 {
	if t.Dtype == pg.Float64 {
		return slices.Clone(pg.View[float64](t))
	}
	src := pg.View[float32](t)
	out := make([]float64, len(src))
	for k, v := range src {
		out[k] = float64(v)
	}
	return out
}

func (b *base) State() State {
	s := State{Name: b.name, Step: b.step, Buffers: map[string][]float64{}}
	if math.Float64bits(b.lr) != math.Float64bits(b.lr0) {
		s.Buffers[lrKey] = []float64{b.lr}
	}
	for i, n := range b.steps {
		if n != b.step {
			s.Buffers[stepKey+"/"+strconv.Itoa(i)] = []float64{float64(n)}
		}
	}
	for k, kind := range b.kinds {
		for i, buf := range b.bufs[k] {
			if buf.Data != nil {
				s.Buffers[kind+"/"+strconv.Itoa(i)] = toFloat64s(buf)
			}
		}
	}
	return s
}

// Load checks s's names and indices; buffer lengths are checked against
// the parameters at the next Step. If every is set, a state with Step > 0
// must hold every buffer of every parameter.
func (b *base) load(s State, every bool) error {
	if s.Name != "" && s.Name != b.name {
		return fmt.Errorf("optim: the state is %s's, but this run's optimizer is %s; resume with the same optimizer", s.Name,
			b.name)
	}
	if s.Step < 0 {
		return fmt.Errorf("optim: state at step %d; want >= 0", s.Step)
	}
	fresh := newBase(b.name, b.lr0, b.n, b.kinds...)
	for i := range fresh.steps {
		fresh.steps[i] = s.Step
	}
	for key, v := range s.Buffers {
		if err := b.loadEntry(&fresh, s.Step, key, v); err != nil {
			return err
		}
	}
	if every {
		for k, kind := range b.kinds {
			for i, buf := range fresh.bufs[k] {
				if buf.Data == nil && fresh.steps[i] > 0 {
					return fmt.Errorf("optim: state at step %d has no %s/%d; the state is incomplete", fresh.steps[i], kind, i)
				}
			}
		}
	}
	b.step, b.steps, b.bufs, b.lr = s.Step, fresh.steps, fresh.bufs, fresh.lr
	return nil
}

// loadEntry checks State.Buffers[key] = v of a state at step and puts it
// into fresh: the rate, a parameter's step count or a buffer.
func (b *base) loadEntry(fresh *base, step int, key string, v []float64) error {
	if key == lrKey {
		if len(v) != 1 || checkLR(v[0]) != nil {
			return fmt.Errorf("optim: state %q is %v; want one finite learning rate >= 0", key, v)
		}
		fresh.lr = v[0]
		return nil
	}
	kind, idx, _ := strings.Cut(key, "/")
	k, i := slices.Index(b.kinds, kind), -1
	if n, err := strconv.Atoi(idx); err == nil && n >= 0 && n < b.n && strconv.Itoa(n) == idx {
		i = n
	}
	if kind == stepKey && i >= 0 {
		if len(v) != 1 || v[0] != math.Trunc(v[0]) || v[0] < 0 || v[0] > float64(step) {
			return fmt.Errorf("optim: state %q is %v; want one whole number of steps in [0, %d]", key, v, step)
		}
		fresh.steps[i] = int(v[0])
		return nil
	}
	if k < 0 || i < 0 {
		return fmt.Errorf("optim: state buffer %q is not one %s keeps for %d parameters (%s/0 … %s/%d)", key, b.name, b.n,
			b.kindsOrNone(), b.kindsOrNone(), b.n-1)
	}
	fresh.bufs[k][i] = pg.Float64s(slices.Clone(v))
	return nil
}

func (b *base) kindsOrNone() string {
	if len(b.kinds) == 0 {
		return "(none)"
	}
	return strings.Join(b.kinds, "|")
}
