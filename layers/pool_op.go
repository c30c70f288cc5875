package layers

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// poolOp is the forward max pooling; input x. Its buffers follow Note
// [buffers owned by the op].
type poolOp struct {
	pointerOp
	geom poolGeom
	dt   tensor.Dtype

	inShp, outShp tensor.Shape // made once, as convOp's

	out ownBuf
	arg []int32 // per output, the argmax's index in its input plane; read by poolGradOp
	ran bool    // arg holds a forward run's argmaxes
}

func (op *poolOp) Arity() int { return 1 }

func (op *poolOp) Type() hm.Type {
	t4 := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t4, t4)
}

func newPoolOp(g poolGeom, dt tensor.Dtype) *poolOp {
	return &poolOp{geom: g, dt: dt, inShp: tensor.Shape{g.n, g.c, g.h, g.w}, outShp: tensor.Shape{g.n, g.c, g.oh, g.ow}}
}

func (op *poolOp) inShape() tensor.Shape  { return op.inShp }
func (op *poolOp) outShape() tensor.Shape { return op.outShp }

func (op *poolOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.outShape().Clone(), nil
}

func (op *poolOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) { return op.run(nil, in) }

func (op *poolOp) UsePreallocDo(p gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.run(p, in)
}

func (op *poolOp) run(prealloc gorgonia.Value, in []gorgonia.Value) (gorgonia.Value, error) {
	const fn = "layers.MaxPool2d"
	if len(in) != 1 {
		return nil, fmt.Errorf("%s: %d inputs; want 1", fn, len(in))
	}
	x, err := denseArg(fn, 0, in[0], op.inShape(), op.dt)
	if err != nil {
		return nil, err
	}
	out := op.out.pick(prealloc, op.dt, op.outShape(), inputs{x})
	if op.arg == nil {
		op.arg = make([]int32, op.outShape().TotalSize())
	}
	switch op.dt {
	case tensor.Float32:
		maxPoolForward(op.geom, x.Float32s(), out.Float32s(), op.arg)
	default:
		maxPoolForward(op.geom, x.Float64s(), out.Float64s(), op.arg)
	}
	op.ran = true
	return out, nil
}

func (op *poolOp) WriteHash(h hash.Hash) {
	g := op.geom
	fmt.Fprintf(h, "layers.MaxPool2d{kernel=%d,%d stride=%d,%d}", g.kh, g.kw, g.strH, g.strW)
}

func (op *poolOp) Hashcode() uint32 { return hashOf(op) }

func (op *poolOp) String() string {
	g := op.geom
	return fmt.Sprintf("MaxPool2d{kernel=%d,%d stride=%d,%d}", g.kh, g.kw, g.strH, g.strW)
}

func (op *poolOp) DiffWRT(inputs int) []bool { return []bool{true} }

func (op *poolOp) SymDiff(inputs gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if len(inputs) != 1 {
		return nil, fmt.Errorf("layers.MaxPool2d: SymDiff got %d inputs; want 1", len(inputs))
	}
	dx, err := gorgonia.ApplyOp(&poolGradOp{fwd: op}, grad)
	if err != nil {
		return nil, fmt.Errorf("layers.MaxPool2d: input gradient: %w", err)
	}
	return gorgonia.Nodes{dx}, nil
}

// poolGradOp scatters the output gradient to the forward pass's argmaxes;
// input dOut. It reads the forward op's argmaxes, which the tape computed
// before dOut could exist; it is not differentiable itself.
type poolGradOp struct {
	pointerOp
	fwd *poolOp
	out ownBuf
}

func (op *poolGradOp) Arity() int { return 1 }

func (op *poolGradOp) Type() hm.Type {
	t4 := gorgonia.TensorType{Dims: 4, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t4, t4)
}

func (op *poolGradOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.fwd.inShape().Clone(), nil
}

func (op *poolGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) { return op.run(nil, in) }

func (op *poolGradOp) UsePreallocDo(p gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.run(p, in)
}

func (op *poolGradOp) run(prealloc gorgonia.Value, in []gorgonia.Value) (gorgonia.Value, error) {
	const fn = "layers.MaxPool2d input gradient"
	if len(in) != 1 {
		return nil, fmt.Errorf("%s: %d inputs; want 1", fn, len(in))
	}
	f := op.fwd
	dOut, err := denseArg(fn, 0, in[0], f.outShape(), f.dt)
	if err != nil {
		return nil, err
	}
	if !f.ran {
		return nil, fmt.Errorf("%s: the forward pooling has not run on this graph; run the whole graph", fn)
	}
	out := op.out.pick(prealloc, f.dt, f.inShape(), inputs{dOut})
	switch f.dt {
	case tensor.Float32:
		maxPoolBackward(f.geom, dOut.Float32s(), f.arg, out.Float32s())
	default:
		maxPoolBackward(f.geom, dOut.Float64s(), f.arg, out.Float64s())
	}
	return out, nil
}

func (op *poolGradOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "layers.MaxPool2dGrad{%p}", op.fwd) }
func (op *poolGradOp) Hashcode() uint32      { return hashOf(op) }
func (op *poolGradOp) String() string        { return "MaxPool2dGrad" }
