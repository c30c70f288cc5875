package diloco

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// State is everything a DiLoCo's next steps depend on, for a checkpoint:
// with the inner optimizer's state and the parameters (the local ones) it
// resumes a run exactly.
type State struct {
	Step   int         // inner steps counted: the phase within H
	Global [][]float64 // the global parameters (float32 values widen exactly)
	Outer  []optim.State
	// Pending holds, per fragment, the averaged pseudo-gradient that has
	// arrived but is not applied yet (Delay > 0); nil for none.
	Pending [][]float64
}

// State waits for the reductions in flight and returns a deep copy of the
// state. It is collective when a reduction is in flight: every rank calls
// it at the same inner step.
func (d *DiLoCo) State(ctx context.Context) (State, error) {
	s := State{Step: d.step, Pending: make([][]float64, len(d.frags))}
	for _, g := range d.global {
		s.Global = append(s.Global, Widen(g))
	}
	for i, f := range d.frags {
		if err := d.wait(ctx, f); err != nil {
			return State{}, fmt.Errorf("diloco: fragment %d: %w", i, err)
		}
		if f.pending {
			s.Pending[i] = Widen(f.buf)
		}
		s.Outer = append(s.Outer, f.outer.State())
	}
	return s, nil
}

// Load replaces the state with a copy of s, taken from a DiLoCo made with
// the same options over the same parameters.
func (d *DiLoCo) Load(s State) error {
	if len(s.Global) != len(d.global) || len(s.Outer) != len(d.frags) || len(s.Pending) != len(d.frags) {
		return fmt.Errorf("diloco: a state of %d parameters and %d fragments, but this DiLoCo has %d and %d",
			len(s.Global), len(s.Outer), len(d.global), len(d.frags))
	}
	if s.Step < 0 {
		return fmt.Errorf("diloco: a state at inner step %d", s.Step)
	}
	for i, g := range s.Global {
		if len(g) != d.sizes[i] {
			return fmt.Errorf("diloco: the state's global parameter %d has %d values, want %d", i, len(g), d.sizes[i])
		}
	}
	for i, f := range d.frags {
		if p := s.Pending[i]; p != nil && len(p) != f.buf.Len() {
			return fmt.Errorf("diloco: the state's pending fragment %d has %d values, want %d", i, len(p), f.buf.Len())
		}
		if err := f.outer.Load(s.Outer[i]); err != nil {
			return fmt.Errorf("diloco: fragment %d's outer optimizer: %w", i, err)
		}
	}
	for i, g := range s.Global {
		Narrow(d.global[i], g)
	}
	for i, f := range d.frags {
		f.work, f.pending = nil, s.Pending[i] != nil
		if f.pending {
			Narrow(f.buf, s.Pending[i])
		}
	}
	d.step = s.Step
	return nil
}

// Global returns the global parameters: views of the DiLoCo's own copies,
// which the caller must not write.
func (d *DiLoCo) Global() []pg.Tensor { return append([]pg.Tensor(nil), d.global...) }

// BytesSent is the bytes of pseudo-gradients this rank has handed to the
// group's allreduce (what a ring allreduce sends is about twice that).
func (d *DiLoCo) BytesSent() int64 { return d.sent }

// StepCount is the inner steps counted.
func (d *DiLoCo) StepCount() int { return d.step }

// Fragments returns each fragment's parameter indices, a copy.
func (d *DiLoCo) Fragments() [][]int {
	out := make([][]int, len(d.frags))
	for i, f := range d.frags {
		out[i] = append([]int(nil), f.params...)
	}
	return out
}

// Flush applies, in fragment order, every fragment whose reduction is in
// flight, as if its delay ended now: the end of a run, whose last
// fragments were sent less than Delay inner steps ago and would otherwise
// never reach the global parameters (Close abandons them). It returns the
// fragments it applied. It is collective: every rank calls it once, after
// its last Step, with the same parameters. Options.Alpha mixes params as on
// any arrival.
func (d *DiLoCo) Flush(ctx context.Context, params []pg.Tensor) (applied []int, err error) {
	if err := d.checkParams(params); err != nil {
		return nil, err
	}
	for i, f := range d.frags {
		if !f.pending {
			continue
		}
		if err := d.apply(ctx, f, params, false); err != nil {
			return applied, fmt.Errorf("diloco: flushing fragment %d after inner step %d: %w", i, d.step, err)
		}
		applied = append(applied, i)
	}
	return applied, nil
}

// Close waits for the reductions in flight, so that none outlives the
// caller's group; it applies none of them (Flush does).
func (d *DiLoCo) Close(ctx context.Context) error {
	var first error
	for _, f := range d.frags {
		if err := d.wait(ctx, f); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Widen copies a float32 or float64 tensor into float64s, exactly: how a
// State holds parameters.
func Widen(t pg.Tensor) []float64 {
	out := make([]float64, t.Len())
	_ = backend.Convert(pg.Float64s(out), t) // float to float of one length: cannot fail
	return out
}

// Narrow writes float64s into a float32 or float64 tensor of their length,
// rounding to float32 where it is one.
func Narrow(t pg.Tensor, v []float64) { _ = backend.Convert(t, pg.Float64s(v)) }
