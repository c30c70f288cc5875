package main

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Note [the CNN in GoMLX]
//
// The CNN's convolution blocks (model/spec.go's LeNet-5: a 5×5
// convolution with bias, padded by 2 in the first block and not in the
// second, the activation, a 2×2 max pool of stride 2) are written with
// ops simplego v0.26.0 runs forward and that need no gradient simplego
// lacks: GoMLX's own convolution differentiates through Reverse, and its
// max pool through SelectAndScatterMax, neither of which simplego
// implements, and its Pad (a slice's gradient) is missing too. So a
// convolution is im2col (25 slices of the padded input, stacked) and one
// DotGeneral with the [out, in·5·5] weight, padding is a concatenation
// with zeros, the pool is a reshape to 2×2 windows and a max, and the
// backward pass is written out as for the dense layers (Note [the dense
// layer's gradient]): the weight's gradient is one DotGeneral of δ with
// the patches, the patches' gradient one DotGeneral of the weight with δ,
// folded back onto the input (col2im) by 25 zero-padded additions; the
// pool's gradient goes to the first element equal to its window's maximum.

const (
	cnnKernel = 5
	cnnPool   = 2
)

// cnnBlock is what one convolution block's forward pass keeps for its
// backward.
type cnnBlock struct {
	inDims  []int       // the block's input [rows, C, H, W], unpadded
	pad     int         // the convolution's padding on each side
	patches *graph.Node // im2col of the padded input: [rows, C·5·5, Ho·Wo]
	w2      *graph.Node // the weight as [out, C·5·5]
	z, a    *graph.Node // the convolution plus bias, and its activation: [rows, out, Ho, Wo]
	out     *graph.Node // the pool of a
}

// cnnFeatures is the CNN's convolutional part (Note [the CNN in GoMLX]):
// x [rows, C·H·W] reshaped to [rows, C, H, W], the two blocks, and the
// features flattened to [rows, F] in model's row-major order. It returns
// the features, the fully connected head's parameters (fc1, fc2, fc3) and
// the function that turns ∂L/∂features into the four convolution
// parameters' gradients.
func (n gomlxNet) cnnFeatures(x *graph.Node, params []*graph.Node) (*graph.Node, []*graph.Node,
	func(*graph.Node) []*graph.Node) {
	s := n.spec
	rows := x.Shape().Dimensions[0]
	h := graph.Reshape(x, rows, s.InputShape[0], s.InputShape[1], s.InputShape[2])
	var blocks [2]cnnBlock
	for b, pad := range [2]int{2, 0} {
		blocks[b] = n.convForward(h, params[2*b], params[2*b+1], pad)
		h = blocks[b].out
	}
	features := graph.Reshape(h, rows, h.Shape().Size()/rows)
	backward := func(dFeatures *graph.Node) []*graph.Node {
		d := graph.Reshape(dFeatures, blocks[1].out.Shape().Dimensions...)
		w1, b1, dIn := n.convBackward(blocks[1], d, true)
		w0, b0, _ := n.convBackward(blocks[0], dIn, false)
		return []*graph.Node{w0, b0, w1, b1}
	}
	return features, params[4:], backward
}

// convForward is one block: padding, im2col, the product with the weight,
// the bias, the activation and the pool.
func (n gomlxNet) convForward(h, w, bias *graph.Node, pad int) cnnBlock {
	blk := cnnBlock{inDims: h.Shape().Dimensions, pad: pad}
	hp := padZeros(padZeros(h, 2, pad, pad), 3, pad, pad)
	d := hp.Shape().Dimensions
	ho, wo := d[2]-cnnKernel+1, d[3]-cnnKernel+1
	var cols []*graph.Node
	for ki := range cnnKernel {
		for kj := range cnnKernel {
			cols = append(cols, graph.Slice(hp, graph.AxisRange(), graph.AxisRange(), graph.AxisRange(ki, ki+ho),
				graph.AxisRange(kj, kj+wo)))
		}
	}
	kk := d[1] * cnnKernel * cnnKernel // the index of (c, ki, kj) is c·25 + ki·5 + kj, torch's weight layout
	blk.patches = graph.Reshape(graph.Stack(cols, 2), d[0], kk, ho*wo)
	out := w.Shape().Dimensions[0]
	blk.w2 = graph.Reshape(w, out, kk)
	z := graph.DotGeneral(blk.w2, []int{1}, nil, blk.patches, []int{1}, nil) // [out, rows, Ho·Wo]
	z = graph.Reshape(graph.TransposeAllAxes(z, 1, 0, 2), d[0], out, ho, wo)
	blk.z = graph.Add(z, graph.Reshape(bias, 1, out, 1, 1))
	blk.a = activate(blk.z, n.spec.Activation)
	blk.out = maxPool(blk.a)
	return blk
}

// convBackward is a block's gradient from ∂L/∂out: the weight's and the
// bias's, and with input, the gradient of the block's input.
func (n gomlxNet) convBackward(blk cnnBlock, dOut *graph.Node, input bool) (gW, gb, dIn *graph.Node) {
	dz := activationBackward(maxPoolBackward(blk.a, blk.out, dOut), denseLayer{z: blk.z, a: blk.a},
		n.spec.Activation)
	zd := dz.Shape().Dimensions
	dz3 := graph.Reshape(dz, zd[0], zd[1], zd[2]*zd[3])                         // [rows, out, P]
	gW = graph.DotGeneral(dz3, []int{0, 2}, nil, blk.patches, []int{0, 2}, nil) // [out, C·25]
	gW = graph.Reshape(gW, zd[1], blk.inDims[1], cnnKernel, cnnKernel)
	gb = graph.ReduceSum(dz3, 0, 2)
	if !input {
		return gW, gb, nil
	}
	dp := graph.DotGeneral(blk.w2, []int{0}, nil, dz3, []int{1}, nil) // [C·25, rows, P]
	c := blk.inDims[1]
	dp = graph.Reshape(graph.TransposeAllAxes(dp, 1, 0, 2), zd[0], c, cnnKernel*cnnKernel, zd[2], zd[3])
	h, w := blk.inDims[2]+2*blk.pad, blk.inDims[3]+2*blk.pad
	for ki := range cnnKernel {
		for kj := range cnnKernel {
			k := ki*cnnKernel + kj
			part := graph.Reshape(graph.Slice(dp, graph.AxisRange(), graph.AxisRange(), graph.AxisRange(k, k+1)),
				zd[0], c, zd[2], zd[3])
			part = padZeros(padZeros(part, 2, ki, h-zd[2]-ki), 3, kj, w-zd[3]-kj)
			if dIn == nil {
				dIn = part
			} else {
				dIn = graph.Add(dIn, part)
			}
		}
	}
	if blk.pad > 0 {
		dIn = graph.Slice(dIn, graph.AxisRange(), graph.AxisRange(), graph.AxisRange(blk.pad, h-blk.pad),
			graph.AxisRange(blk.pad, w-blk.pad))
	}
	return gW, gb, dIn
}

// maxPool is a 2×2 max pool of stride 2 over [rows, C, H, W], a trailing
// odd row or column dropped as model's pool drops it: a reshape to
// [rows, C, H/2, 2, W/2, 2] and a max over the windows' axes.
func maxPool(a *graph.Node) *graph.Node {
	d := a.Shape().Dimensions
	oh, ow := d[2]/cnnPool, d[3]/cnnPool
	return graph.ReduceMax(graph.Reshape(evenCrop(a), d[0], d[1], oh, cnnPool, ow, cnnPool), 3, 5)
}

// maxPoolBackward is maxPool's gradient: dOut to the first element of
// each window (in row-major order) equal to its maximum, as package
// layers' pool records its argmax, zero elsewhere and in a dropped row or
// column. The first matters: on MNIST's blank background a window's four
// values are often equal.
func maxPoolBackward(a, out, dOut *graph.Node) *graph.Node {
	d := a.Shape().Dimensions
	oh, ow := d[2]/cnnPool, d[3]/cnnPool
	// [rows, C, oh, ow, 4]: each window's elements in row-major order
	a4 := graph.Reshape(graph.TransposeAllAxes(graph.Reshape(evenCrop(a), d[0], d[1], oh, cnnPool, ow, cnnPool),
		0, 1, 2, 4, 3, 5), d[0], d[1], oh, ow, cnnPool*cnnPool)
	at := func(x *graph.Node) *graph.Node {
		return graph.BroadcastToDims(graph.Reshape(x, d[0], d[1], oh, ow, 1), d[0], d[1], oh, ow, cnnPool*cnnPool)
	}
	eq := graph.ConvertDType(graph.Equal(a4, at(out)), a.DType())
	var firsts []*graph.Node
	var seen *graph.Node // 1 where an earlier element of the window was the maximum
	for k := range cnnPool * cnnPool {
		e := graph.Slice(eq, graph.AxisRange(), graph.AxisRange(), graph.AxisRange(), graph.AxisRange(),
			graph.AxisRange(k, k+1))
		if seen == nil {
			firsts, seen = append(firsts, e), e
			continue
		}
		firsts = append(firsts, graph.Mul(e, graph.OneMinus(seen)))
		seen = graph.Max(seen, e)
	}
	da := graph.Mul(graph.Concatenate(firsts, 4), at(dOut))
	da = graph.TransposeAllAxes(graph.Reshape(da, d[0], d[1], oh, ow, cnnPool, cnnPool), 0, 1, 2, 4, 3, 5)
	da = graph.Reshape(da, d[0], d[1], oh*cnnPool, ow*cnnPool)
	return padZeros(padZeros(da, 2, 0, d[2]-oh*cnnPool), 3, 0, d[3]-ow*cnnPool)
}

// evenCrop drops a trailing odd row or column of [rows, C, H, W].
func evenCrop(a *graph.Node) *graph.Node {
	d := a.Shape().Dimensions
	h, w := d[2]/cnnPool*cnnPool, d[3]/cnnPool*cnnPool
	if h == d[2] && w == d[3] {
		return a
	}
	return graph.Slice(a, graph.AxisRange(), graph.AxisRange(), graph.AxisRange(0, h), graph.AxisRange(0, w))
}

// padZeros adds before and after zeros along axis (simplego v0.26.0 has
// no Pad).
func padZeros(x *graph.Node, axis, before, after int) *graph.Node {
	parts := []*graph.Node{x}
	zeros := func(k int) *graph.Node {
		dims := append([]int(nil), x.Shape().Dimensions...)
		dims[axis] = k
		return graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims...))
	}
	if before > 0 {
		parts = append([]*graph.Node{zeros(before)}, parts...)
	}
	if after > 0 {
		parts = append(parts, zeros(after))
	}
	if len(parts) == 1 {
		return x
	}
	return graph.Concatenate(parts, axis)
}
