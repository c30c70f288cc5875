package autogradhooks

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Note [two ops per parameter]
//
// paramHook sits in the forward graph between a parameter and its users. It
// computes nothing: its output is its input Value. Its only job is its
// SymDiff, which Gorgonia calls from inside gorgonia.Grad, at the moment the
// backward walk reaches the wrapper. SymDiff then creates the gradHook node
// on top of the summed incoming gradient. The tape runs nodes in creation
// order, so that node runs among the backward nodes of its layer, right
// after the gradient it reads, provided the wrapper was created where the
// parameter is used (Note [creation order] in doc.go). A hook node created
// after Grad returns is newer than every backward node, so it would run
// last.
//
// gradHook is also an identity. Backpropagate records it as the raw
// parameter's deriv, so params[i].Grad() is the gradHook node's Value, which
// is the very Value the callback was given.

// Note [hash-consing]
//
// ExprGraph.AddNode returns an existing node when the new one has the same
// hash, op hash, children, type and shape. Two parameters of the same shape
// can have structurally identical gradient expressions (d sum(a)/da and
// d sum(b)/db are the same node), so the hook ops must hash their parameter
// index and name, or the second hook would silently become the first. They
// also hash the address of their Set, so two Sets over the same parameters
// never share nodes (and callbacks).

// paramHook is the forward identity op wrapped around parameter idx.
type paramHook struct {
	set  *Set
	idx  int
	name string
	fn   PlaceFunc
}

func (op *paramHook) Arity() int { return 1 }

func (op *paramHook) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}

func (op *paramHook) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	return identityShape(op, in)
}

func (op *paramHook) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	return identityValue(op, in)
}

func (op *paramHook) ReturnsPtr() bool     { return true }
func (op *paramHook) CallsExtern() bool    { return false }
func (op *paramHook) OverwritesInput() int { return -1 }

func (op *paramHook) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "autogradhooks.ParamHook{%p,%d,%q}", op.set, op.idx, op.name)
}

func (op *paramHook) Hashcode() uint32 { return hashOf(op) }
func (op *paramHook) String() string   { return fmt.Sprintf("ParamHook{%d:%s}", op.idx, op.name) }

func (op *paramHook) DiffWRT(int) []bool { return []bool{true} }

// SymDiff is where the hook is planted: the gradient flowing into the
// wrapped parameter passes through a gradHook node that calls fn.
func (op *paramHook) SymDiff(_ gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	hook := &gradHook{set: op.set, idx: op.idx, name: op.name, fn: op.fn}
	n, err := gorgonia.ApplyOp(hook, grad)
	if err != nil {
		return nil, fmt.Errorf("autogradhooks: planting the hook of parameter %d (%s): %w", op.idx, op.name, err)
	}
	return gorgonia.Nodes{n}, nil
}

// gradHook is the backward identity op that calls fn with the gradient of
// parameter idx as soon as the tape reaches it.
type gradHook struct {
	set  *Set
	idx  int
	name string
	fn   PlaceFunc
}

func (op *gradHook) Arity() int { return 1 }

func (op *gradHook) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}

func (op *gradHook) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	return identityShape(op, in)
}

// Do runs on RunAll's internal goroutine. A panic there would kill the
// process (the caller's recover cannot reach that goroutine), so a panicking
// callback is turned into an error like any other failure.
func (op *gradHook) Do(in ...gorgonia.Value) (out gorgonia.Value, err error) {
	v, err := identityValue(op, in)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, &HookError{Index: op.idx, Param: op.name, Err: fmt.Errorf("%w: %v", ErrHookPanic, r)}
		}
	}()
	placed, err := op.fn(op.idx, v)
	if err != nil {
		return nil, &HookError{Index: op.idx, Param: op.name, Err: err}
	}
	if placed != nil {
		if !placed.Shape().Eq(v.Shape()) || placed.Dtype() != v.Dtype() {
			return nil, &HookError{Index: op.idx, Param: op.name,
				Err: fmt.Errorf("the placed gradient is %v %v; the gradient is %v %v", placed.Dtype(), placed.Shape(), v.Dtype(),
					v.Shape())}
		}
		return placed, nil
	}
	return v, nil
}

func (op *gradHook) ReturnsPtr() bool     { return true }
func (op *gradHook) CallsExtern() bool    { return false } // no Alloc instruction: a fresh output register
func (op *gradHook) OverwritesInput() int { return -1 }    // never clobber the gradient's register

func (op *gradHook) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "autogradhooks.GradHook{%p,%d,%q}", op.set, op.idx, op.name)
}

func (op *gradHook) Hashcode() uint32 { return hashOf(op) }
func (op *gradHook) String() string   { return fmt.Sprintf("GradHook{%d:%s}", op.idx, op.name) }

// DiffWRT and SymDiff make the hook node differentiable (as the identity,
// without firing) so a graph that differentiates through a gradient, such
// as a gradient penalty, still passes gorgonia.Grad.
func (op *gradHook) DiffWRT(int) []bool { return []bool{true} }

func (op *gradHook) SymDiff(_ gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	return gorgonia.Nodes{grad}, nil
}

func identityShape(op gorgonia.Op, in []gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("autogradhooks: %v takes 1 input, got %d", op, len(in))
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("autogradhooks: %v: input shape is a %T, not a tensor.Shape", op, in[0])
	}
	return s.Clone(), nil
}

func identityValue(op gorgonia.Op, in []gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 1 || in[0] == nil {
		return nil, fmt.Errorf("autogradhooks: %v needs exactly 1 non-nil input, got %d", op, len(in))
	}
	return in[0], nil
}

func hashOf(op gorgonia.Op) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
