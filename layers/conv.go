package layers

import (
	"fmt"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ConvOpts configures Conv2d. The zero value is a convolution of stride 1
// without padding. Dilation is always 1.
type ConvOpts struct {
	// Padding is the number of zeros added on each side of the input's
	// height (Padding[0]) and width (Padding[1]).
	Padding [2]int
	// Stride is the step between windows along height and width; 0 means 1.
	Stride [2]int
	// NoInputGrad marks the input as data whose gradient nobody needs (the
	// batch fed to a model's first convolution). The op then declares itself
	// not differentiable with respect to x, so gorgonia.Grad creates no
	// input-gradient node at all, and asking Grad for dx is an error.
	// Without it the input gradient is built, and runs every step, even
	// where x is a leaf nobody asks the gradient of: Grad differentiates an
	// op with respect to all its inputs once it needs any of them (w).
	NoInputGrad bool
}

// Conv2d is the 2-D cross-correlation of x [N,C,H,W] with the filters
// w [O,C,KH,KW] (PyTorch's Conv2d layout), plus the bias b [O] per output
// channel when b is not nil; the result is [N,O,OH,OW] with
// OH = (H + 2·Padding[0] − KH)/Stride[0] + 1 (floor) and OW alike.
//
// The forward pass and all three gradients (filters, bias, input) are
// matrix products on the layouts they need; the op keeps the batch's
// column matrices from the forward pass for the filter gradient. Every
// buffer, outputs included, is allocated once per graph node on the first
// run and reused by every later run: a node's Value is valid until the next
// run of the machine, so copy it to keep it longer. x, w and b must share
// one dtype, float32 or float64.
func Conv2d(x, w, b *gorgonia.Node, opts ConvOpts) (*gorgonia.Node, error) {
	g, dt, err := convCheck(x, w, b, &opts)
	if err != nil {
		return nil, err
	}
	op := newConvOp(g, dt, b != nil, opts.NoInputGrad)
	children := []*gorgonia.Node{x, w}
	if b != nil {
		children = append(children, b)
	}
	n, err := gorgonia.ApplyOp(op, children...)
	if err != nil {
		return nil, fmt.Errorf("layers.Conv2d: %w", err)
	}
	return n, nil
}

// convCheck validates Conv2d's arguments and returns the geometry.
func convCheck(x, w, b *gorgonia.Node, opts *ConvOpts) (convGeom, tensor.Dtype, error) {
	var g convGeom
	if x == nil || w == nil {
		return g, tensor.Dtype{}, fmt.Errorf("layers.Conv2d: x and w must not be nil")
	}
	xs, ws := x.Shape(), w.Shape()
	if len(xs) != 4 {
		return g, tensor.Dtype{}, fmt.Errorf("layers.Conv2d: x has shape %v; it must be [batch, channels, height, "+
			"width]: reshape it to 4-D first", xs)
	}
	if len(ws) != 4 || ws[1] != xs[1] {
		return g, tensor.Dtype{}, fmt.Errorf("layers.Conv2d: w has shape %v; for x %v it must be [out_channels, %d, "+
			"kernel_h, kernel_w]", ws, xs, xs[1])
	}
	dt, err := floatDtype("layers.Conv2d", x, w, b)
	if err != nil {
		return g, dt, err
	}
	if b != nil && (len(b.Shape()) != 1 || b.Shape()[0] != ws[0]) {
		return g, dt, fmt.Errorf("layers.Conv2d: b has shape %v; it must be [%d], one bias per output channel "+
			"(or nil)", b.Shape(), ws[0])
	}
	for i := range 2 {
		if opts.Stride[i] == 0 {
			opts.Stride[i] = 1
		}
		if opts.Stride[i] < 0 || opts.Padding[i] < 0 {
			return g, dt, fmt.Errorf("layers.Conv2d: stride %v and padding %v must not be negative",
				opts.Stride, opts.Padding)
		}
	}
	g = convGeom{n: xs[0], c: xs[1], h: xs[2], w: xs[3], o: ws[0], kh: ws[2], kw: ws[3],
		padH: opts.Padding[0], padW: opts.Padding[1], strH: opts.Stride[0], strW: opts.Stride[1]}
	g.oh = (g.h+2*g.padH-g.kh)/g.strH + 1
	g.ow = (g.w+2*g.padW-g.kw)/g.strW + 1
	if g.kh < 1 || g.kw < 1 || g.h+2*g.padH < g.kh || g.w+2*g.padW < g.kw {
		return g, dt, fmt.Errorf("layers.Conv2d: the %d×%d kernel does not fit the %d×%d input padded by %v: "+
			"pad the input more or use a smaller kernel", g.kh, g.kw, g.h, g.w, opts.Padding)
	}
	return g, dt, nil
}

// floatDtype returns the nodes' common dtype (nil nodes skipped), which
// must be float32 or float64.
func floatDtype(fn string, nodes ...*gorgonia.Node) (tensor.Dtype, error) {
	var dt tensor.Dtype
	for i, n := range nodes {
		if n == nil {
			continue
		}
		d := n.Dtype()
		if d != tensor.Float32 && d != tensor.Float64 {
			return d, fmt.Errorf("%s: input %d is %v; only float32 and float64 are supported", fn, i, d)
		}
		if i > 0 && d != dt {
			return d, fmt.Errorf("%s: input %d is %v but input 0 is %v: convert them to one dtype", fn, i, d, dt)
		}
		dt = d
	}
	return dt, nil
}

// denseArg returns the op input v as a contiguous *tensor.Dense of the
// given shape and dtype.
func denseArg(fn string, i int, v gorgonia.Value, shape tensor.Shape, dt tensor.Dtype) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("%s: input %d is a %T; a *tensor.Dense is needed", fn, i, v)
	}
	if !d.Shape().Eq(shape) || d.Dtype() != dt {
		return nil, fmt.Errorf("%s: input %d is %v %v; the graph was built for %v %v", fn, i, d.Dtype(), d.Shape(),
			dt, shape)
	}
	if d.RequiresIterator() {
		return nil, fmt.Errorf("%s: input %d is a strided view; materialize it first", fn, i)
	}
	return d, nil
}
