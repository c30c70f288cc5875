package autogradhooks

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// backwardMark is the identity op MarkBackward puts on the loss, so
// forward and backward, which run in one RunAll, can be told apart. Its
// SymDiff plants a twin on the loss's seed gradient; the twin calls fn
// when the tape runs it. Grad creates the twin first among the backward
// nodes and the tape runs nodes in creation order, so fn marks the moment
// forward ends and backward begins.
type backwardMark struct {
	backward bool
	fn       func()
}

// MarkBackward returns cost passed through an identity op that calls fn,
// on the tape's goroutine, at the moment backward begins. Use the result
// as the loss (differentiate it, not cost). fn must not block or panic.
func MarkBackward(cost *gorgonia.Node, fn func()) (*gorgonia.Node, error) {
	return gorgonia.ApplyOp(&backwardMark{fn: fn}, cost)
}

func (op *backwardMark) Arity() int { return 1 }

func (op *backwardMark) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}

func (op *backwardMark) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) == 1 {
		if s, ok := in[0].(tensor.Shape); ok {
			return s.Clone(), nil
		}
	}
	return nil, fmt.Errorf("%v: want one tensor.Shape, got %v", op, in)
}

func (op *backwardMark) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("%v: want 1 input, got %d", op, len(in))
	}
	if op.backward {
		op.fn()
	}
	return in[0], nil
}

func (op *backwardMark) ReturnsPtr() bool     { return true }
func (op *backwardMark) CallsExtern() bool    { return false }
func (op *backwardMark) OverwritesInput() int { return -1 }

func (op *backwardMark) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "backwardMark{%p,%t}", op, op.backward)
}

func (op *backwardMark) Hashcode() uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

func (op *backwardMark) String() string {
	return fmt.Sprintf("autogradhooks.backwardMark{%t}", op.backward)
}

func (op *backwardMark) DiffWRT(int) []bool { return []bool{true} }

func (op *backwardMark) SymDiff(_ gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if op.backward {
		return gorgonia.Nodes{grad}, nil
	}
	twin, err := gorgonia.ApplyOp(&backwardMark{backward: true, fn: op.fn}, grad)
	return gorgonia.Nodes{twin}, err
}
