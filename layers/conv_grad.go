package layers

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The backward ops of Conv2d. They read the forward op's geometry (and, for
// the filter gradient, its column matrices, which the tape computed before
// the output gradient they take as input could exist). They are not
// differentiable themselves: second derivatives of a convolution are not
// supported.

// pointerOp holds what every op of this package answers the same way: it
// returns a pointer to a buffer of its own, calls no extern and overwrites
// no input (Note [buffers owned by the op]).
type pointerOp struct{}

func (pointerOp) ReturnsPtr() bool     { return true }
func (pointerOp) CallsExtern() bool    { return false }
func (pointerOp) OverwritesInput() int { return -1 }

// convFilterGradOp is dW = Σ_s dOut_s·col_sᵀ; input dOut.
type convFilterGradOp struct {
	pointerOp
	fwd *convOp
	out ownBuf
}

func (op *convFilterGradOp) Arity() int { return 1 }

func (op *convFilterGradOp) Type() hm.Type {
	t4 := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t4, t4)
}

func (op *convFilterGradOp) shape() tensor.Shape { return op.fwd.wShape }

func (op *convFilterGradOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.shape().Clone(), nil
}

func (op *convFilterGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) { return op.run(nil, in) }

func (op *convFilterGradOp) UsePreallocDo(p gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.run(p, in)
}

func (op *convFilterGradOp) run(prealloc gorgonia.Value, in []gorgonia.Value) (gorgonia.Value, error) {
	const fn = "layers.Conv2d filter gradient"
	if len(in) != 1 {
		return nil, fmt.Errorf("%s: %d inputs; want 1", fn, len(in))
	}
	f := op.fwd
	dOut, err := denseArg(fn, 0, in[0], f.outShape(), f.dt)
	if err != nil {
		return nil, err
	}
	if !f.ran {
		return nil, fmt.Errorf("%s: the forward convolution has not run on this graph; run the whole graph", fn)
	}
	out := op.out.pick(prealloc, f.dt, op.shape(), inputs{dOut})
	switch f.dt {
	case tensor.Float32:
		convFilterGrad(f.geom, dOut.Float32s(), f.cols.([]float32), out.Float32s())
	default:
		convFilterGrad(f.geom, dOut.Float64s(), f.cols.([]float64), out.Float64s())
	}
	return out, nil
}

func (op *convFilterGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "layers.Conv2dFilterGrad{%p}", op.fwd)
}
func (op *convFilterGradOp) Hashcode() uint32 { return hashOf(op) }
func (op *convFilterGradOp) String() string   { return "Conv2dFilterGrad" }

// convBiasGradOp is db = Σ over samples and positions of dOut; input dOut.
type convBiasGradOp struct {
	pointerOp
	fwd *convOp
	out ownBuf
}

func (op *convBiasGradOp) Arity() int { return 1 }

func (op *convBiasGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 4, Of: a}, gorgonia.TensorType{Dims: 1, Of: a})
}

func (op *convBiasGradOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.fwd.bShape.Clone(), nil
}

func (op *convBiasGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) { return op.run(nil, in) }

func (op *convBiasGradOp) UsePreallocDo(p gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.run(p, in)
}

func (op *convBiasGradOp) run(prealloc gorgonia.Value, in []gorgonia.Value) (gorgonia.Value, error) {
	const fn = "layers.Conv2d bias gradient"
	if len(in) != 1 {
		return nil, fmt.Errorf("%s: %d inputs; want 1", fn, len(in))
	}
	f := op.fwd
	dOut, err := denseArg(fn, 0, in[0], f.outShape(), f.dt)
	if err != nil {
		return nil, err
	}
	out := op.out.pick(prealloc, f.dt, f.bShape, inputs{dOut})
	switch f.dt {
	case tensor.Float32:
		convBiasGrad(f.geom, dOut.Float32s(), out.Float32s())
	default:
		convBiasGrad(f.geom, dOut.Float64s(), out.Float64s())
	}
	return out, nil
}

func (op *convBiasGradOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "layers.Conv2dBiasGrad{%p}", op.fwd) }
func (op *convBiasGradOp) Hashcode() uint32      { return hashOf(op) }
func (op *convBiasGradOp) String() string        { return "Conv2dBiasGrad" }

// convInputGradOp is dx_s = col2im(Wᵀ·dOut_s); inputs w and dOut.
type convInputGradOp struct {
	pointerOp
	fwd  *convOp
	out  ownBuf
	dcol any // []float32 or []float64, one sample's k×p
}

func (op *convInputGradOp) Arity() int { return 2 }

func (op *convInputGradOp) Type() hm.Type {
	t4 := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t4, t4, t4)
}

func (op *convInputGradOp) shape() tensor.Shape { return op.fwd.xShape }

func (op *convInputGradOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.shape().Clone(), nil
}

func (op *convInputGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) { return op.run(nil, in) }

func (op *convInputGradOp) UsePreallocDo(p gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.run(p, in)
}

func (op *convInputGradOp) run(prealloc gorgonia.Value, in []gorgonia.Value) (gorgonia.Value, error) {
	const fn = "layers.Conv2d input gradient"
	if len(in) != 2 {
		return nil, fmt.Errorf("%s: %d inputs; want 2", fn, len(in))
	}
	f := op.fwd
	g := f.geom
	w, err := denseArg(fn, 0, in[0], f.wShape, f.dt)
	if err != nil {
		return nil, err
	}
	dOut, err := denseArg(fn, 1, in[1], f.outShape(), f.dt)
	if err != nil {
		return nil, err
	}
	out := op.out.pick(prealloc, f.dt, op.shape(), inputs{w, dOut})
	switch f.dt {
	case tensor.Float32:
		convInputGrad(g, w.Float32s(), dOut.Float32s(), scratch[float32](&op.dcol, g.k()*g.p()), out.Float32s())
	default:
		convInputGrad(g, w.Float64s(), dOut.Float64s(), scratch[float64](&op.dcol, g.k()*g.p()), out.Float64s())
	}
	return out, nil
}

func (op *convInputGradOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "layers.Conv2dInputGrad{%p}", op.fwd)
}
func (op *convInputGradOp) Hashcode() uint32 { return hashOf(op) }
func (op *convInputGradOp) String() string   { return "Conv2dInputGrad" }
