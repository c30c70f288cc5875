package main

import (
	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Note [the dense layer's gradient]
//
// For z = h·W + b with the loss's gradient δ = ∂L/∂z, the gradients are
// ∂L/∂W = hᵀ·δ, ∂L/∂b = Σ_rows δ and ∂L/∂h = δ·Wᵀ: two matrix products and
// a sum. GoMLX v0.26.0's autodiff of graph.Dot builds them instead by
// broadcasting δ to [rows, in, out], multiplying elementwise and reducing
// (dotVJP in rev_autodiff.go), which XLA fuses back into products but
// simplego runs as written: for the default MLP that is most of a step's
// time (docs/gomlx.md). So the program writes the backward pass itself,
// layer by layer, with graph.DotGeneral for the products (simplego runs
// those as matrix products), from the softmax cross-entropy's gradient
// δ = (softmax(z) − onehot(y)) / rows down. What autodiff would do
// elsewhere it still does: the CNN's convolutions and pools are
// differentiated by graph.Gradient of Σ features ⊙ ∂L/∂features
// (gomlxcnn.go).

// gomlxNet is the model as a GoMLX program (Note [--engine gomlx]).
type gomlxNet struct {
	spec    model.Spec
	dtype   dtypes.DType // the parameters' (--dtype)
	compute dtypes.DType // the program's arithmetic: dtype, or --mixed-precision's
	reduce  pg.Dtype     // --reduce-dtype under --mixed-precision; 0: the compute dtype
	dropout float64      // --dropout: the probability of zeroing a hidden unit in training
	// autodiff differentiates with GoMLX's graph.Gradient instead of Note
	// [the dense layer's gradient]: for BenchmarkEngineStep's comparison.
	autodiff bool
}

func newGoMLXNet(spec model.Spec, c config) (gomlxNet, error) {
	n := gomlxNet{spec: spec, dtype: dtypes.Float32, dropout: c.dropout}
	if spec.Dtype.String() == "float64" {
		n.dtype = dtypes.Float64
	}
	n.compute = n.dtype
	switch c.mixedPrecision {
	case "bfloat16":
		n.compute = dtypes.BFloat16
	case "float16":
		n.compute = dtypes.Float16
	}
	if c.reduceDtype != "" {
		var err error
		if n.reduce, err = pg.ParseDtype(c.reduceDtype); err != nil {
			return n, usagef("--reduce-dtype: %v", err)
		}
	}
	return n, nil
}

// pgDtypeOf is the process groups' name for a GoMLX float dtype.
func pgDtypeOf(d dtypes.DType) pg.Dtype {
	switch d {
	case dtypes.Float64:
		return pg.Float64
	case dtypes.BFloat16:
		return pg.BFloat16
	case dtypes.Float16:
		return pg.Float16
	}
	return pg.Float32
}

// mixed is the reducer's MixedPrecision for --mixed-precision; nil
// without.
func (n gomlxNet) mixed() *reducer.MixedPrecision {
	if n.compute == n.dtype {
		return nil
	}
	return &reducer.MixedPrecision{ParamDtype: pgDtypeOf(n.compute), ReduceDtype: n.reduce}
}

// paramShape is a parameter's input shape.
func (n gomlxNet) paramShape(dims []int) shapes.Shape { return shapes.Make(n.dtype, dims...) }

// batch is a micro-batch's features as the program's input: rows of the
// data set's features rounded once to --dtype, as model.Net.Feed rounds
// them.
func (n gomlxNet) batch(x []float64, rows int) *tensors.Tensor {
	if n.dtype == dtypes.Float64 {
		return tensors.FromFlatDataAndDimensions(append([]float64(nil), x...), rows, len(x)/rows)
	}
	return tensors.FromFlatDataAndDimensions(toFloat32(x), rows, len(x)/rows)
}

// labels is a micro-batch's labels as the program's input.
func (n gomlxNet) labels(labels []int) *tensors.Tensor {
	out := make([]int32, len(labels))
	for i, c := range labels {
		out[i] = int32(c)
	}
	return tensors.FromFlatDataAndDimensions(out, len(labels))
}

func toFloat32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// denseLayer is what one layer's forward pass keeps for its backward.
type denseLayer struct {
	in   *graph.Node // h, the layer's input
	w    *graph.Node
	z    *graph.Node // h·W + b
	a    *graph.Node // the activation of z (hidden layers)
	mask *graph.Node // --dropout's scaled mask of a (hidden layers in training); nil without
}

// program is the micro-batch's program: inputs are the parameters, the
// features [rows, D], the labels [rows] and, with --dropout, a random
// state; outputs are the loss, the logits and each parameter's gradient,
// in the compute dtype.
func (n gomlxNet) program(inputs []*graph.Node) []*graph.Node {
	params, x, y, rng := n.inputs(inputs)
	var head []*graph.Node
	var features func(dFeatures *graph.Node) []*graph.Node
	if n.spec.Kind == "cnn" {
		x, head, features = n.cnnFeatures(x, params)
	} else {
		head = params
	}
	tape, logits := n.denseForward(x, head, rng)
	loss, logits, delta := n.lossAndDelta(logits, y)
	if n.autodiff {
		return append([]*graph.Node{loss, logits}, graph.Gradient(loss, params...)...)
	}
	grads, dIn := n.denseBackward(tape, delta, features != nil)
	if features != nil {
		grads = append(features(dIn), grads...)
	}
	return append([]*graph.Node{loss, logits}, grads...)
}

// inputs splits a program's inputs: the parameters and the features in
// the compute dtype, the labels, and the random state (nil without
// --dropout).
func (n gomlxNet) inputs(inputs []*graph.Node) (params []*graph.Node, x, y, rng *graph.Node) {
	np := len(inputs) - 2
	if n.dropout > 0 {
		np--
		rng = inputs[np+2]
	}
	params = make([]*graph.Node, np)
	for i, p := range inputs[:np] {
		params[i] = graph.ConvertDType(p, n.compute)
	}
	return params, graph.ConvertDType(inputs[np], n.compute), inputs[np+1], rng
}

// denseForward runs the fully connected layers, the activation (and
// --dropout) between them.
func (n gomlxNet) denseForward(h *graph.Node, params []*graph.Node, rng *graph.Node) ([]denseLayer, *graph.Node) {
	layers := len(params) / 2
	tape := make([]denseLayer, layers)
	for l := range layers {
		w, b := params[2*l], params[2*l+1]
		z := graph.Add(graph.Dot(h, w), graph.ExpandAxes(b, 0))
		tape[l] = denseLayer{in: h, w: w, z: z}
		if l == layers-1 {
			return tape, z
		}
		tape[l].a = activate(z, n.spec.Activation)
		h = tape[l].a
		if rng != nil {
			rng, tape[l].mask = n.dropoutMask(rng, h.Shape())
			h = graph.Mul(h, tape[l].mask)
		}
	}
	return tape, h
}

// dropoutMask is torch's inverted dropout: each unit kept with
// probability 1 − p and then scaled by 1/(1 − p).
func (n gomlxNet) dropoutMask(rng *graph.Node, shape shapes.Shape) (*graph.Node, *graph.Node) {
	g := rng.Graph()
	rng, u := graph.RandomUniform(rng, shapes.Make(dtypes.Float32, shape.Dimensions...))
	keep := graph.GreaterOrEqual(u, graph.Scalar(g, dtypes.Float32, n.dropout))
	scale := graph.Scalar(g, n.compute, 1/(1-n.dropout))
	scales := graph.BroadcastToShape(scale, shape)
	return rng, graph.Where(keep, scales, graph.ZerosLike(scales))
}

// lossAndDelta is the mean softmax cross-entropy over the rows, the
// logits and the loss's gradient with respect to them, computed in float32
// at least (a half-precision log-sum-exp loses the loss).
func (n gomlxNet) lossAndDelta(logits, y *graph.Node) (loss, z, delta *graph.Node) {
	dt := n.compute
	if dt == dtypes.BFloat16 || dt == dtypes.Float16 {
		dt = dtypes.Float32
	}
	z = graph.ConvertDType(logits, dt)
	rows := float64(z.Shape().Dimensions[0])
	lsm := graph.LogSoftmax(z, -1)
	onehot := graph.OneHot(y, n.spec.Classes, dt)
	loss = graph.DivScalar(graph.Neg(graph.ReduceAllSum(graph.Mul(onehot, lsm))), rows)
	delta = graph.DivScalar(graph.Sub(graph.Exp(lsm), onehot), rows)
	return loss, z, graph.ConvertDType(delta, n.compute)
}

// denseBackward is Note [the dense layer's gradient], from the last layer
// to the first: the gradients of W and b of each layer, in the parameters'
// order, and with input the gradient of the first layer's input.
func (n gomlxNet) denseBackward(tape []denseLayer, delta *graph.Node, input bool) ([]*graph.Node, *graph.Node) {
	grads := make([]*graph.Node, 2*len(tape))
	for l := len(tape) - 1; l >= 0; l-- {
		var prev *denseLayer
		if l > 0 {
			prev = &tape[l-1]
		}
		grads[2*l], grads[2*l+1], delta = n.layerBackward(tape[l], prev, delta, l > 0 || input)
	}
	return grads, delta
}

// layerBackward is one layer's part of denseBackward: the gradients of
// its W and b from δ, and, when down, the δ of the layer below (prev, nil
// for the first layer: then the gradient of the layer's input).
func (n gomlxNet) layerBackward(t denseLayer, prev *denseLayer, delta *graph.Node,
	down bool) (gW, gb, next *graph.Node) {
	gW = graph.DotGeneral(t.in, []int{0}, nil, delta, []int{0}, nil) // hᵀ·δ: [in, out]
	gb = graph.ReduceSum(delta, 0)
	if !down {
		return gW, gb, nil
	}
	dh := graph.DotGeneral(delta, []int{1}, nil, t.w, []int{1}, nil) // δ·Wᵀ: [rows, in]
	if prev == nil {
		return gW, gb, dh
	}
	if prev.mask != nil {
		dh = graph.Mul(dh, prev.mask)
	}
	return gW, gb, activationBackward(dh, *prev, n.spec.Activation)
}

// activationBackward is the gradient through the activation of a hidden
// layer: relu's 1 where z > 0, tanh's 1 − tanh(z)².
func activationBackward(dh *graph.Node, l denseLayer, name string) *graph.Node {
	if name == "tanh" {
		return graph.Mul(dh, graph.OneMinus(graph.Square(l.a)))
	}
	return graph.Where(graph.GreaterThan(l.z, graph.ZerosLike(l.z)), dh, graph.ZerosLike(dh))
}
