package model

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Note [cross-entropy op]
//
// The loss is one op, Σ_i w_i·CE_i with CE_i = −Σ_c y_ic·log_softmax(z_i)_c,
// rather than Gorgonia's LogSoftMax followed by products and sums, for two
// reasons. Gorgonia v0.9.18's softmax kernels (tensor v0.9.24) subtract
// the wrong maximum (the first element of the whole array, not of the
// row), so a row whose own logits are far above another row's overflows
// exp and the loss becomes NaN: float32 overflows at a gap of 89. And
// computing it in one place lets it follow PyTorch's formulas:
// log_softmax as (z − max) − log Σ exp(z − max), and in backward, NLL's
// gradient g_ic = −w_i·y_ic followed by log_softmax's backward
// g_ic − exp(log_softmax_ic)·Σ_c g_ic.

// xentOp is the loss: inputs logits [B,C], targets [B,C], weights [B];
// output a scalar. Only the logits are differentiated.
type xentOp struct{}

func crossEntropy(logits, y, w *gorgonia.Node) (*gorgonia.Node, error) {
	return gorgonia.ApplyOp(xentOp{}, logits, y, w)
}

func (xentOp) Arity() int { return 3 }
func (xentOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	m, v := gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 1, Of: a}
	return hm.NewFnType(m, m, v, a)
}
func (xentOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}
func (xentOp) ReturnsPtr() bool         { return false }
func (xentOp) CallsExtern() bool        { return false }
func (xentOp) OverwritesInput() int     { return -1 }
func (op xentOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op xentOp) Hashcode() uint32      { return hashOf(op) }
func (xentOp) String() string           { return "WeightedSoftmaxCrossEntropy" }
func (xentOp) DiffWRT(int) []bool       { return []bool{true, false, false} }

func (xentOp) SymDiff(in gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	d, err := gorgonia.ApplyOp(xentDiffOp{}, in[0], in[1], in[2], grad)
	return gorgonia.Nodes{d, nil, nil}, err
}

func (xentOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	z, y, w, err := xentInputs(in)
	if err != nil {
		return nil, err
	}
	switch z := z.Data().(type) {
	case []float32:
		return gorgonia.NewF32(xentLoss(z, y.Data().([]float32), w.Data().([]float32))), nil
	case []float64:
		return gorgonia.NewF64(xentLoss(z, y.Data().([]float64), w.Data().([]float64))), nil
	}
	return nil, fmt.Errorf("cross-entropy: dtype %v: want float32 or float64", z.Dtype())
}

// xentDiffOp is the loss's gradient with respect to the logits: inputs
// logits, targets, weights and the loss's own gradient; output [B,C].
type xentDiffOp struct{}

func (xentDiffOp) Arity() int { return 4 }
func (xentDiffOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	m, v := gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 1, Of: a}
	return hm.NewFnType(m, m, v, a, m)
}
func (xentDiffOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, ok := in[0].(tensor.Shape)
	if !ok {
		return nil, fmt.Errorf("cross-entropy gradient: logits have no shape (%v)", in[0])
	}
	return s.Clone(), nil
}
func (xentDiffOp) ReturnsPtr() bool         { return false }
func (xentDiffOp) CallsExtern() bool        { return false }
func (xentDiffOp) OverwritesInput() int     { return -1 }
func (op xentDiffOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op xentDiffOp) Hashcode() uint32      { return hashOf(op) }
func (xentDiffOp) String() string           { return "WeightedSoftmaxCrossEntropyGrad" }

func (xentDiffOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if len(in) != 4 {
		return nil, fmt.Errorf("cross-entropy gradient: %d inputs, want 4", len(in))
	}
	z, y, w, err := xentInputs(in[:3])
	if err != nil {
		return nil, err
	}
	up, err := scalarOf(in[3])
	if err != nil {
		return nil, err
	}
	out := tensor.New(tensor.WithShape(z.Shape().Clone()...), tensor.Of(z.Dtype()))
	switch zd := z.Data().(type) {
	case []float32:
		xentGrad(zd, y.Data().([]float32), w.Data().([]float32), float32(up), out.Data().([]float32))
	case []float64:
		xentGrad(zd, y.Data().([]float64), w.Data().([]float64), up, out.Data().([]float64))
	default:
		return nil, fmt.Errorf("cross-entropy gradient: dtype %v: want float32 or float64", z.Dtype())
	}
	return out, nil
}

// xentInputs checks that logits and targets are [B,C] and weights [B], of
// one dtype.
func xentInputs(in []gorgonia.Value) (z, y, w tensor.Tensor, err error) {
	if len(in) != 3 {
		return nil, nil, nil, fmt.Errorf("cross-entropy: %d inputs, want 3", len(in))
	}
	ts := make([]tensor.Tensor, 3)
	for k, v := range in {
		t, ok := v.(tensor.Tensor)
		if !ok || t.Dtype() != in[0].Dtype() {
			return nil, nil, nil, fmt.Errorf("cross-entropy: input %d is %T of %v; want tensors of one dtype", k, v, v.Dtype())
		}
		ts[k] = t
	}
	z, y, w = ts[0], ts[1], ts[2]
	zs := z.Shape()
	if zs.Dims() != 2 || !zs.Eq(y.Shape()) || w.Shape().TotalSize() != zs[0] {
		return nil, nil, nil, fmt.Errorf("cross-entropy: logits %v, targets %v, weights %v; want [B,C], [B,C], [B]", zs,
			y.Shape(), w.Shape())
	}
	return z, y, w, nil
}

func scalarOf(v gorgonia.Value) (float64, error) {
	switch v := v.(type) {
	case *gorgonia.F64:
		return float64(*v), nil
	case *gorgonia.F32:
		return float64(*v), nil
	}
	if f := floats(v); len(f) == 1 {
		return f[0], nil
	}
	return 0, fmt.Errorf("cross-entropy gradient: the loss's gradient is %T, want a scalar", v)
}

type float interface{ ~float32 | ~float64 }

// logSoftmax writes log_softmax(z) into out as PyTorch does:
// (z − max) − log Σ exp(z − max).
func logSoftmax[T float](z, out []T) {
	m := z[0]
	for _, v := range z[1:] {
		m = max(m, v)
	}
	var sum T
	for k, v := range z {
		out[k] = v - m
		sum += T(math.Exp(float64(out[k])))
	}
	lse := T(math.Log(float64(sum)))
	for k := range out {
		out[k] -= lse
	}
}

// xentLoss is Σ_i w_i·(−Σ_c y_ic·log_softmax(z_i)_c) over the rows of z.
func xentLoss[T float](z, y, w []T) T {
	c := len(z) / len(w)
	ls := make([]T, c)
	var loss T
	for i, wi := range w {
		logSoftmax(z[i*c:(i+1)*c], ls)
		var ce T
		for k, yk := range y[i*c : (i+1)*c] {
			ce -= yk * ls[k]
		}
		loss += T(wi * ce)
	}
	return loss
}

// xentGrad writes d(up·loss)/dz into out.
func xentGrad[T float](z, y, w []T, up T, out []T) {
	c := len(z) / len(w)
	ls := make([]T, c)
	for i, wi := range w {
		logSoftmax(z[i*c:(i+1)*c], ls)
		g := out[i*c : (i+1)*c]
		var sum T
		for k, yk := range y[i*c : (i+1)*c] {
			g[k] = -T(up*wi) * yk
			sum += g[k]
		}
		for k := range g {
			g[k] -= T(T(math.Exp(float64(ls[k]))) * sum)
		}
	}
}

func hashOf(op fmt.Stringer) uint32 {
	h := fnv.New32a()
	fmt.Fprint(h, op.String())
	return h.Sum32()
}
