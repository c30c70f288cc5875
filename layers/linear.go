package layers

import (
	"fmt"

	"github.com/chewxy/hm"
	"github.com/goddp/ddp/internal/gemm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Linear is the fully connected layer x·w + b: x is [N, in], w [in, out]
// (the transpose of PyTorch's nn.Linear weight, as the model zoo lays it
// out), b [out] or nil for no bias; the result is [N, out]. It is one op,
// a matrix product with the bias added to each row, and its gradients are
// one product each, dx = dz·wᵀ and dw = xᵀ·dz, on the operands as they lie
// (no transposed copies), and db = Σ_rows dz.
//
// x's gradient is built only when x is computed by an op; a leaf x (the
// graph's input, as a first layer's) is not differentiated, so
// gorgonia.Grad with respect to it fails. Values are reused every step
// (Note [output buffers]): a node's value is valid until the machine's
// next run.
func Linear(x, w, b *gorgonia.Node) (*gorgonia.Node, error) {
	if x == nil || w == nil {
		return nil, fmt.Errorf("layers: Linear: x and w must not be nil")
	}
	xs, ws := x.Shape(), w.Shape()
	if xs.Dims() != 2 || ws.Dims() != 2 || xs[1] != ws[0] {
		return nil, fmt.Errorf("layers: Linear: x %v and w %v; want [N, in] and [in, out]", xs, ws)
	}
	if x.Dtype() != w.Dtype() || (b != nil && b.Dtype() != w.Dtype()) {
		return nil, fmt.Errorf("layers: Linear: dtypes differ: x %v, w %v", x.Dtype(), w.Dtype())
	}
	op := &linearOp{inputGrad: x.Op() != nil, bias: b != nil}
	if b == nil {
		op.opMeta = opMeta{fmt.Sprintf("Linear(dx=%t)", op.inputGrad)}
		return gorgonia.ApplyOp(op, x, w)
	}
	if b.Shape().TotalSize() != ws[1] || b.Dims() != 1 {
		return nil, fmt.Errorf("layers: Linear: bias %v; want [%d]", b.Shape(), ws[1])
	}
	op.opMeta = opMeta{fmt.Sprintf("LinearBias(dx=%t)", op.inputGrad)}
	return gorgonia.ApplyOp(op, x, w, b)
}

// linearOp is x·w (+ b).
type linearOp struct {
	opMeta
	inputGrad bool // x is differentiated
	bias      bool // a third input b [out]
	out       ownBuf
}

func (op *linearOp) Arity() int {
	if op.bias {
		return 3
	}
	return 2
}

func (op *linearOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	m := gorgonia.TensorType{Dims: 2, Of: a}
	if op.bias {
		return hm.NewFnType(m, m, gorgonia.TensorType{Dims: 1, Of: a}, m)
	}
	return hm.NewFnType(m, m, m)
}

func (op *linearOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	return productShape(in, 0, 0, 1, 1)
}

// productShape is [in[a].DimSize(da), in[b].DimSize(db)].
func productShape(in []gorgonia.DimSizer, a, da, b, db int) (tensor.Shape, error) {
	if len(in) <= max(a, b) {
		return nil, fmt.Errorf("layers: %d input shapes", len(in))
	}
	r, err := in[a].DimSize(da)
	if err != nil {
		return nil, err
	}
	c, err := in[b].DimSize(db)
	if err != nil {
		return nil, err
	}
	return tensor.Shape{r, c}, nil
}

func (op *linearOp) DiffWRT(n int) []bool { return []bool{op.inputGrad, true, true}[:n] }

func (op *linearOp) SymDiff(in gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	grads := make(gorgonia.Nodes, len(in))
	var err error
	if op.inputGrad {
		if grads[0], err = gorgonia.ApplyOp(&linearGradOp{opMeta: opMeta{"LinearGradX"}}, grad, in[1]); err != nil {
			return nil, err
		}
	}
	if grads[1], err = gorgonia.ApplyOp(&linearGradOp{opMeta: opMeta{"LinearGradW"}, weight: true}, in[0],
		grad); err != nil {
		return nil, err
	}
	if op.bias {
		if grads[2], err = gorgonia.ApplyOp(&biasGradOp{opMeta: opMeta{"LinearGradB"}}, grad); err != nil {
			return nil, err
		}
	}
	return grads, nil
}

func (op *linearOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.UsePreallocDo(nil, in...)
}

func (op *linearOp) UsePreallocDo(prealloc gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	ds, err := denseInputs(op.name, in, op.Arity())
	if err != nil {
		return nil, err
	}
	x, w := ds[0], ds[1]
	xs, ws := x.Shape(), w.Shape()
	if xs.Dims() != 2 || ws.Dims() != 2 || xs[1] != ws[0] || (op.bias && ds[2].Shape().TotalSize() != ws[1]) {
		return nil, fmt.Errorf("layers: %s: inputs %v, %v; want [N, in], [in, out] (and [out])", op.name, xs, ws)
	}
	n, k, m := xs[0], xs[1], ws[1]
	z := op.out.pick(prealloc, x.Dtype(), tensor.Shape{n, m}, ds)
	if x.Dtype() == tensor.Float32 {
		forwardLinear(gemm.F32, views(ds, (*tensor.Dense).Float32s), z.Float32s(), n, k, m)
	} else {
		forwardLinear(gemm.F64, views(ds, (*tensor.Dense).Float64s), z.Float64s(), n, k, m)
	}
	return z, nil
}

// forwardLinear writes z = x·w, then adds b to every row when the op has
// one (the order Gorgonia's Mul and BroadcastAdd round in); in holds x,
// w and b.
func forwardLinear[T linearFloat](mul gemmFunc[T], in [maxArity][]T, z []T, n, k, m int) {
	mul(false, false, n, m, k, 1, in[0], k, in[1], m, 0, z, m)
	if in[2] == nil {
		return
	}
	for r := range n {
		row := z[r*m : (r+1)*m]
		for j, v := range in[2][:m] {
			row[j] += v
		}
	}
}

// linearFloat is the element type of the products.
type linearFloat interface{ float32 | float64 }

// gemmFunc is gemm.F32 or gemm.F64.
type gemmFunc[T linearFloat] func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int,
	beta T, c []T, ldc int)

// views is the data of ds's tensors, nil for absent inputs.
func views[T linearFloat](ds inputs, data func(*tensor.Dense) []T) (v [maxArity][]T) {
	for i, d := range ds {
		if d != nil {
			v[i] = data(d)
		}
	}
	return v
}

// linearGradOp is one of Linear's product gradients: dx = dz·wᵀ from
// (dz [N, out], w [in, out]), or with weight set dw = xᵀ·dz from
// (x [N, in], dz [N, out]).
type linearGradOp struct {
	opMeta
	weight bool
	out    ownBuf
}

func (op *linearGradOp) Arity() int { return 2 }

func (op *linearGradOp) Type() hm.Type {
	m := gorgonia.TensorType{Dims: 2, Of: hm.TypeVariable('a')}
	return hm.NewFnType(m, m, m)
}

func (op *linearGradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if op.weight {
		return productShape(in, 0, 1, 1, 1)
	}
	return productShape(in, 0, 0, 1, 0)
}

func (op *linearGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.UsePreallocDo(nil, in...)
}

func (op *linearGradOp) UsePreallocDo(prealloc gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	ds, err := denseInputs(op.name, in, 2)
	if err != nil {
		return nil, err
	}
	a, b := ds[0].Shape(), ds[1].Shape()
	if a.Dims() != 2 || b.Dims() != 2 || (op.weight && a[0] != b[0]) || (!op.weight && a[1] != b[1]) {
		return nil, fmt.Errorf("layers: %s: inputs %v and %v do not fit", op.name, a, b)
	}
	shape := tensor.Shape{a[0], b[0]} // dz·wᵀ
	if op.weight {
		shape = tensor.Shape{a[1], b[1]} // xᵀ·dz
	}
	out := op.out.pick(prealloc, ds[0].Dtype(), shape, ds)
	if ds[0].Dtype() == tensor.Float32 {
		gradProduct(gemm.F32, op.weight, views(ds, (*tensor.Dense).Float32s), out.Float32s(), a, b)
	} else {
		gradProduct(gemm.F64, op.weight, views(ds, (*tensor.Dense).Float64s), out.Float64s(), a, b)
	}
	return out, nil
}

// gradProduct is xᵀ·dz (weight) or dz·wᵀ; as and bs are the inputs'
// shapes.
func gradProduct[T linearFloat](mul gemmFunc[T], weight bool, in [maxArity][]T, out []T, as, bs tensor.Shape) {
	if weight { // in = x [N, in], dz [N, out]
		mul(true, false, as[1], bs[1], as[0], 1, in[0], as[1], in[1], bs[1], 0, out, bs[1])
		return
	}
	// in = dz [N, out], w [in, out]
	mul(false, true, as[0], bs[0], as[1], 1, in[0], as[1], in[1], bs[1], 0, out, bs[0])
}

// biasGradOp is db = Σ_rows dz: [N, out] → [out].
type biasGradOp struct {
	opMeta
	out ownBuf
}

func (op *biasGradOp) Arity() int { return 1 }

func (op *biasGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 1, Of: a})
}

func (op *biasGradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("layers: %s: %d input shapes", op.name, len(in))
	}
	c, err := in[0].DimSize(1)
	return tensor.Shape{c}, err
}

func (op *biasGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.UsePreallocDo(nil, in...)
}

func (op *biasGradOp) UsePreallocDo(prealloc gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	ds, err := denseInputs(op.name, in, 1)
	if err != nil {
		return nil, err
	}
	s := ds[0].Shape()
	if s.Dims() != 2 {
		return nil, fmt.Errorf("layers: %s: input %v; want [N, out]", op.name, s)
	}
	out := op.out.pick(prealloc, ds[0].Dtype(), tensor.Shape{s[1]}, ds)
	if ds[0].Dtype() == tensor.Float32 {
		sumRows(ds[0].Float32s(), out.Float32s(), s[1])
	} else {
		sumRows(ds[0].Float64s(), out.Float64s(), s[1])
	}
	return out, nil
}

// sumRows writes the sum of dz's rows of width m into out, row by row.
func sumRows[T linearFloat](dz, out []T, m int) {
	clear(out)
	for r := 0; r+m <= len(dz); r += m {
		for j, v := range dz[r : r+m] {
			out[j] += v
		}
	}
}
