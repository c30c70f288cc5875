package layers

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	"github.com/chewxy/math32"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ReLU is max(x, 0) elementwise (NaN stays NaN), computed as x·[x > 0]. Its gradient is taken
// from the output, dy where y > 0 and 0 elsewhere, so the gradient at 0 is
// 0, as PyTorch's; Gorgonia's Rectify, x·(x ≥ 0), passes dy at 0.
// Values are reused every step (Note [output buffers]).
func ReLU(x *gorgonia.Node) (*gorgonia.Node, error) { return activation(x, relu) }

// Tanh is tanh(x) elementwise, as Gorgonia's Tanh computes it (math32's
// for float32); its gradient is dy·(1 − y²), from the output.
func Tanh(x *gorgonia.Node) (*gorgonia.Node, error) { return activation(x, tanh) }

type actKind int

const (
	relu actKind = iota
	tanh
)

func (k actKind) String() string { return [...]string{"ReLU", "Tanh"}[k] }

func activation(x *gorgonia.Node, k actKind) (*gorgonia.Node, error) {
	if x == nil {
		return nil, fmt.Errorf("layers: %v: x must not be nil", k)
	}
	if dt := x.Dtype(); dt != tensor.Float32 && dt != tensor.Float64 {
		return nil, fmt.Errorf("layers: %v: dtype %v; want float32 or float64", k, dt)
	}
	return gorgonia.ApplyOp(&actOp{opMeta: opMeta{k.String()}, kind: k}, x)
}

// actOp is an activation y = f(x); with grad set it is its gradient
// dx = f'(y)·dy from the inputs y and dy.
type actOp struct {
	opMeta
	kind actKind
	grad bool
	out  ownBuf
}

func (op *actOp) Arity() int {
	if op.grad {
		return 2
	}
	return 1
}

func (op *actOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	if op.grad {
		return hm.NewFnType(a, a, a)
	}
	return hm.NewFnType(a, a)
}

func (op *actOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("layers: %s: no input shapes", op.name)
	}
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("layers: %s: input shape is %T", op.name, in[0])
	}
	return s.Clone(), nil
}

func (op *actOp) DiffWRT(n int) []bool {
	if op.grad {
		return make([]bool, n)
	}
	return []bool{true}
}

func (op *actOp) SymDiff(_ gorgonia.Nodes, y, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if op.grad {
		return nil, fmt.Errorf("layers: %s is not differentiable", op.name)
	}
	d, err := gorgonia.ApplyOp(&actOp{opMeta: opMeta{op.name + "Grad"}, kind: op.kind, grad: true}, y, grad)
	return gorgonia.Nodes{d}, err
}

func (op *actOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.UsePreallocDo(nil, in...)
}

// UsePreallocDo may write over an input: element i is read before it is
// written, and nothing else.
func (op *actOp) UsePreallocDo(prealloc gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	ds, err := denseInputs(op.name, in, op.Arity())
	if err != nil {
		return nil, err
	}
	if op.grad && ds[1].Shape().TotalSize() != ds[0].Shape().TotalSize() {
		return nil, fmt.Errorf("layers: %s: y %v and dy %v differ", op.name, ds[0].Shape(), ds[1].Shape())
	}
	out := op.out.pick(prealloc, ds[0].Dtype(), ds[0].Shape(), inputs{})
	if ds[0].Dtype() == tensor.Float32 {
		op.run32(ds[0].Float32s(), ds, out.Float32s())
	} else {
		op.run64(ds[0].Float64s(), ds, out.Float64s())
	}
	return out, nil
}

func (op *actOp) run32(x []float32, ds inputs, out []float32) {
	switch {
	case op.grad:
		actGrad(op.kind, x, ds[1].Float32s(), out)
	case op.kind == relu:
		reluForward(x, out)
	default:
		for i, v := range x {
			out[i] = math32.Tanh(v)
		}
	}
}

func (op *actOp) run64(x []float64, ds inputs, out []float64) {
	switch {
	case op.grad:
		actGrad(op.kind, x, ds[1].Float64s(), out)
	case op.kind == relu:
		reluForward(x, out)
	default:
		for i, v := range x {
			out[i] = math.Tanh(v)
		}
	}
}

// reluForward is x·[x > 0], Gorgonia's Rectify to the bit (−0 for
// negative x, NaN for NaN), without a branch.
func reluForward[T linearFloat](x, out []T) {
	out = out[:len(x)]
	for i, v := range x {
		out[i] = v * step[T](v > 0)
	}
}

// step is 1 for true and 0 for false: a product with it has no branch,
// which random signs would mispredict half the time.
func step[T linearFloat](b bool) T {
	var i uint8
	if b {
		i = 1
	}
	return T(i)
}

// actGrad writes f'(y)·dy into out: (1 − y·y)·dy for tanh, in Gorgonia's
// order, and dy where y > 0 for ReLU.
func actGrad[T linearFloat](k actKind, y, dy, out []T) {
	if k == tanh {
		for i, v := range y {
			out[i] = (1 - v*v) * dy[i]
		}
		return
	}
	dy, out = dy[:len(y)], out[:len(y)]
	for i, v := range y {
		out[i] = dy[i] * step[T](v > 0)
	}
}
