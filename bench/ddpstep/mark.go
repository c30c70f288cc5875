package main

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// backwardMark is an identity op applied to the loss. Its SymDiff plants
// a twin on the loss's seed gradient; the twin calls fn when the tape runs
// it. Gorgonia's tape runs nodes in creation order and Grad creates the
// twin first among the backward nodes, so fn marks the moment forward ends
// and backward begins.
type backwardMark struct {
	backward bool
	fn       func()
}

func (op *backwardMark) Arity() int { return 1 }

func (op *backwardMark) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(a, a)
}

func (op *backwardMark) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) == 1 {
		if s, ok := in[0].(tensor.Shape); ok {
			return s.Clone(), nil
		}
	}
	return nil, fmt.Errorf("%v: want one tensor.Shape, got %v", op, in)
}

func (op *backwardMark) Do(in ...G.Value) (G.Value, error) {
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

func (op *backwardMark) String() string { return fmt.Sprintf("backwardMark{%t}", op.backward) }

func (op *backwardMark) DiffWRT(int) []bool { return []bool{true} }

func (op *backwardMark) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if op.backward {
		return G.Nodes{grad}, nil
	}
	twin, err := G.ApplyOp(&backwardMark{backward: true, fn: op.fn}, grad)
	return G.Nodes{twin}, err
}
