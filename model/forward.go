package model

import (
	"fmt"
	"slices"

	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Net is a model's forward graph and loss, over a fixed batch of
// spec.Batch rows.
type Net struct {
	X      *gorgonia.Node // [Batch, Features] inputs, row-major (the cnn reshapes them to [Batch, C, H, W])
	Y      *gorgonia.Node // [Batch, Classes] one-hot targets
	W      *gorgonia.Node // [Batch] per-row loss weights: 1/n for the n real rows, 0 for padding rows
	Logits *gorgonia.Node // [Batch, Classes]
	Loss   *gorgonia.Node // scalar Σ_i W_i·CE_i: the mean softmax cross-entropy over the real rows

	spec Spec
	// Copies of the logits and the loss, taken by Read nodes as the
	// forward pass computes them. The machine reuses registers, so the
	// nodes' own values may be overwritten later in the same run.
	logits, loss gorgonia.Value
	rows         int // real rows of the last Feed
	feed         feedBuffers
}

// Forward builds the forward graph and the loss on p's graph. It calls
// use(i) each time the graph uses parameter i, layer by layer: pass a
// ddp.DDP's Node method, so that each gradient hook sits where its
// layer is, or nil for the raw parameters (plain training). spec must be
// p's spec, except that Batch may differ. Forward builds one graph per
// Params; it is not safe to run concurrently with any other Gorgonia graph
// construction (see the package documentation).
func (p *Params) Forward(spec Spec, use func(i int) *gorgonia.Node) (*Net, error) {
	if err := p.compatible(spec); err != nil {
		return nil, err
	}
	if p.built {
		return nil, fmt.Errorf(
			"model: Forward already built this model's graph; make a new Params (same seed) for a second graph")
	}
	if use == nil {
		use = func(i int) *gorgonia.Node { return p.Nodes[i] }
	}
	f := &forward{p: p, spec: spec, use: use}
	net, err := f.build()
	if err != nil {
		return nil, fmt.Errorf("model: building the %s graph: %w", spec.Kind, err)
	}
	p.built = true
	return net, nil
}

// compatible checks that spec describes p's model.
func (p *Params) compatible(spec Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	a, b := p.spec, spec
	a.Batch, b.Batch = 0, 0
	if a.Kind != b.Kind || a.Activation != b.Activation || a.Classes != b.Classes || a.Dtype != b.Dtype ||
		!slices.Equal(a.InputShape, b.InputShape) || (a.Kind == "mlp" && !slices.Equal(a.Hidden, b.Hidden)) {
		return fmt.Errorf("%w: spec %+v does not describe the model the parameters were made for (%+v)", ErrBadSpec, b, a)
	}
	return nil
}

// forward builds one graph.
type forward struct {
	p     *Params
	spec  Spec
	use   func(i int) *gorgonia.Node
	layer int // index of the next layer's weight in p.Nodes
}

func (f *forward) build() (*Net, error) {
	s, g := f.spec, f.p.Graph
	input := func(name string, shape ...int) *gorgonia.Node {
		v := tensor.New(tensor.WithShape(shape...), tensor.Of(s.Dtype))
		return gorgonia.NewTensor(g, s.Dtype, len(shape), gorgonia.WithShape(shape...), gorgonia.WithName(name),
			gorgonia.WithValue(v))
	}
	n := &Net{spec: cloneSpec(s)}
	n.X = input("x", s.Batch, s.Features())
	n.Y = input("y", s.Batch, s.Classes)
	n.W = input("row_weight", s.Batch)
	var err error
	if s.Kind == "cnn" {
		n.Logits, err = f.cnn(n.X)
	} else {
		n.Logits, err = f.mlp(n.X, len(s.Hidden)+1)
	}
	if err != nil {
		return nil, err
	}
	gorgonia.Read(n.Logits, &n.logits)
	if n.Loss, err = crossEntropy(n.Logits, n.Y, n.W); err != nil {
		return nil, err
	}
	gorgonia.Read(n.Loss, &n.loss)
	return n, nil
}

// mlp applies layers fully connected layers to h, with the activation
// between them.
func (f *forward) mlp(h *gorgonia.Node, layers int) (*gorgonia.Node, error) {
	for l := range layers {
		z, err := f.linear(h)
		if err != nil {
			return nil, err
		}
		if l == layers-1 {
			return z, nil
		}
		if h, err = f.activate(z); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// cnn is conv1 → act → pool → conv2 → act → pool → flatten → fc1 → act →
// fc2 → act → fc3.
func (f *forward) cnn(x *gorgonia.Node) (*gorgonia.Node, error) {
	s := f.spec
	h, err := gorgonia.Reshape(x, tensor.Shape{s.Batch, s.InputShape[0], s.InputShape[1], s.InputShape[2]})
	if err != nil {
		return nil, err
	}
	for _, pad := range []int{conv1Pad, 0} {
		if h, err = f.convBlock(h, pad); err != nil {
			return nil, err
		}
	}
	if h, err = gorgonia.Reshape(h, tensor.Shape{s.Batch, h.Shape().TotalSize() / s.Batch}); err != nil {
		return nil, err
	}
	return f.mlp(h, 3)
}

// convBlock is a 5×5 convolution with bias, the activation and a 2×2 max
// pool of stride 2. The first block's input is the batch, whose gradient
// nobody needs.
func (f *forward) convBlock(h *gorgonia.Node, pad int) (*gorgonia.Node, error) {
	first := f.layer == 0
	w, b, err := f.params()
	if err != nil {
		return nil, err
	}
	if f.p.gorgoniaOps {
		return f.gorgoniaConvBlock(h, w, b, pad)
	}
	z, err := layers.Conv2d(h, w, b, layers.ConvOpts{Padding: [2]int{pad, pad}, NoInputGrad: first})
	if err != nil {
		return nil, err
	}
	if z, err = f.activate(z); err != nil {
		return nil, err
	}
	return layers.MaxPool2d(z, [2]int{poolSize, poolSize}, [2]int{poolSize, poolSize})
}

// gorgoniaConvBlock is convBlock on Gorgonia's own ops.
func (f *forward) gorgoniaConvBlock(h, w, b *gorgonia.Node, pad int) (*gorgonia.Node, error) {
	z, err := gorgonia.Conv2d(h, w, tensor.Shape{convKernel, convKernel}, []int{pad, pad}, []int{1, 1}, []int{1, 1})
	if err != nil {
		return nil, err
	}
	if z, err = addBias(z, b, 1); err != nil {
		return nil, err
	}
	if z, err = f.activate(z); err != nil {
		return nil, err
	}
	return gorgonia.MaxPool2D(z, tensor.Shape{poolSize, poolSize}, []int{0, 0}, []int{poolSize, poolSize})
}

// linear is h·W + b for the next layer.
func (f *forward) linear(h *gorgonia.Node) (*gorgonia.Node, error) {
	w, b, err := f.params()
	if err != nil {
		return nil, err
	}
	if !f.p.gorgoniaOps {
		return layers.Linear(h, w, b)
	}
	z, err := gorgonia.Mul(h, w)
	if err != nil {
		return nil, err
	}
	return addBias(z, b, 1)
}

// params asks use for the next layer's weight, then its bias, at the
// point where the layer uses them.
func (f *forward) params() (w, b *gorgonia.Node, err error) {
	i := f.layer
	if i+1 >= len(f.p.Nodes) {
		return nil, nil, fmt.Errorf("the model has %d parameters; layer %d has none", len(f.p.Nodes), i/2+1)
	}
	f.layer += 2
	if w = f.use(i); w == nil {
		return nil, nil, fmt.Errorf("use(%d) returned nil for %s", i, f.p.Names[i])
	}
	if b = f.use(i + 1); b == nil {
		return nil, nil, fmt.Errorf("use(%d) returned nil for %s", i+1, f.p.Names[i+1])
	}
	return w, b, nil
}

// addBias adds the vector b along axis of z, broadcasting it over z's
// other axes.
func addBias(z, b *gorgonia.Node, axis int) (*gorgonia.Node, error) {
	shape := make(tensor.Shape, z.Dims())
	var bcast []byte
	for d := range shape {
		shape[d] = 1
		if d != axis {
			bcast = append(bcast, byte(d))
		}
	}
	shape[axis] = b.Shape().TotalSize()
	b, err := gorgonia.Reshape(b, shape)
	if err != nil {
		return nil, err
	}
	return gorgonia.BroadcastAdd(z, b, nil, bcast)
}

func (f *forward) activate(z *gorgonia.Node) (*gorgonia.Node, error) {
	switch {
	case f.spec.Activation == "tanh" && f.p.gorgoniaOps:
		return gorgonia.Tanh(z)
	case f.spec.Activation == "tanh":
		return layers.Tanh(z)
	case f.p.gorgoniaOps:
		return gorgonia.Rectify(z)
	}
	return layers.ReLU(z)
}
