package layers

import (
	"fmt"
	"math"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// poolGeom is one max pooling's sizes: x [n,c,h,w], windows kh×kw every
// strH, strW, out [n,c,oh,ow].
type poolGeom struct {
	n, c, h, w int
	kh, kw     int
	strH, strW int
	oh, ow     int
}

func (g poolGeom) planes() int { return g.n * g.c }

// MaxPool2d is the 2-D max pooling of x [N,C,H,W] over kernel[0]×kernel[1]
// windows every stride[0] rows and stride[1] columns (a zero stride means
// the kernel's size, PyTorch's default), without padding; the result is
// [N,C,OH,OW] with OH = (H − kernel[0])/stride[0] + 1 (floor, PyTorch's
// default ceil_mode=False) and OW alike.
//
// As PyTorch's, each output is the first maximum of its window in row-major
// window order, a NaN in the window wins (the last NaN, as PyTorch picks),
// and the gradient goes to that one element. The forward pass records the
// argmax for the backward pass. Buffers are allocated once per graph node
// and reused by every run, as Conv2d's. x must be float32 or float64.
func MaxPool2d(x *gorgonia.Node, kernel, stride [2]int) (*gorgonia.Node, error) {
	g, dt, err := poolCheck(x, kernel, stride)
	if err != nil {
		return nil, err
	}
	n, err := gorgonia.ApplyOp(newPoolOp(g, dt), x)
	if err != nil {
		return nil, fmt.Errorf("layers.MaxPool2d: %w", err)
	}
	return n, nil
}

func poolCheck(x *gorgonia.Node, kernel, stride [2]int) (poolGeom, tensor.Dtype, error) {
	var g poolGeom
	if x == nil {
		return g, tensor.Dtype{}, fmt.Errorf("layers.MaxPool2d: x must not be nil")
	}
	xs := x.Shape()
	if len(xs) != 4 {
		return g, tensor.Dtype{}, fmt.Errorf("layers.MaxPool2d: x has shape %v; it must be [batch, channels, height, "+
			"width]: reshape it to 4-D first", xs)
	}
	dt, err := floatDtype("layers.MaxPool2d", x)
	if err != nil {
		return g, dt, err
	}
	for i := range 2 {
		if stride[i] == 0 {
			stride[i] = kernel[i]
		}
		if kernel[i] < 1 || stride[i] < 1 {
			return g, dt, fmt.Errorf("layers.MaxPool2d: kernel %v and stride %v must be positive", kernel, stride)
		}
	}
	g = poolGeom{n: xs[0], c: xs[1], h: xs[2], w: xs[3], kh: kernel[0], kw: kernel[1], strH: stride[0],
		strW: stride[1]}
	if g.h < g.kh || g.w < g.kw {
		return g, dt, fmt.Errorf("layers.MaxPool2d: the %d×%d window does not fit the %d×%d input: use a smaller "+
			"kernel", g.kh, g.kw, g.h, g.w)
	}
	if g.h*g.w > math.MaxInt32 {
		return g, dt, fmt.Errorf("layers.MaxPool2d: the %d×%d input plane is over 2³¹ elements: split it", g.h, g.w)
	}
	g.oh = (g.h-g.kh)/g.strH + 1
	g.ow = (g.w-g.kw)/g.strW + 1
	return g, dt, nil
}

// maxPoolForward writes each window's maximum to out and its index within
// the input plane to arg.
func maxPoolForward[T convFloat](g poolGeom, x, out []T, arg []int32) {
	hw, ohw := g.h*g.w, g.oh*g.ow
	if g.kh == 2 && g.kw == 2 {
		maxPool2x2(g, x, out, arg)
		return
	}
	for pl := range g.planes() {
		xp := x[pl*hw : (pl+1)*hw]
		op := out[pl*ohw : (pl+1)*ohw]
		ap := arg[pl*ohw : (pl+1)*ohw]
		for oy := 0; oy < g.oh; oy++ {
			for ox := 0; ox < g.ow; ox++ {
				at := maxScan(xp, oy*g.strH*g.w+ox*g.strW, g.w, g.kh, g.kw)
				op[oy*g.ow+ox] = xp[at]
				ap[oy*g.ow+ox] = int32(at)
			}
		}
	}
}

// maxPool2x2 is maxPoolForward for 2×2 windows (LeNet's), without
// branches on the data: random activations make the scan's branches
// unpredictable. later(a, b) is 1 exactly when the scan in window order
// would move from a to b (b > a), for finite a and b and for a = −Inf; a
// window whose maximum is not finite (NaN or ±Inf, rare) takes the scan.
// The value is loaded from the chosen index, so it is the scan's bit for
// bit.
func maxPool2x2[T convFloat](g poolGeom, x, out []T, arg []int32) {
	hw, ohw := g.h*g.w, g.oh*g.ow
	for pl := range g.planes() {
		xp := x[pl*hw : (pl+1)*hw]
		op := out[pl*ohw : (pl+1)*ohw]
		ap := arg[pl*ohw : (pl+1)*ohw]
		for oy := 0; oy < g.oh; oy++ {
			r := oy * g.strH * g.w
			for ox := 0; ox < g.ow; ox++ {
				i := r + ox*g.strW
				a, b, c, d := xp[i], xp[i+1], xp[i+g.w], xp[i+g.w+1]
				i0 := i + later(a, b)
				i1 := i + g.w + later(c, d)
				at := i0 + (i1-i0)*later(xp[i0], xp[i1])
				if m := max(a, b, c, d); m-m != 0 {
					at = maxScan(xp, i, g.w, 2, 2)
				}
				op[oy*g.ow+ox] = xp[at]
				ap[oy*g.ow+ox] = int32(at)
			}
		}
	}
}

// later is 1 when b > a, else 0, from the sign bit of a − b: adding +0
// turns the −0 of (−0) − (+0) into +0, and a − b is never zero for a ≠ b
// (gradual underflow), so ties give 0, as the scan keeps the first. It is
// wrong only where a − b is NaN (both infinite with one sign), which
// maxPool2x2 leaves to the scan.
func later[T convFloat](a, b T) int {
	return int(math.Float64bits(float64(a-b)+0) >> 63)
}

// maxScan returns the index of a kh×kw window's winner in window order:
// the first maximum, else the last NaN. The window starts at base of a
// plane w wide.
func maxScan[T convFloat](xp []T, base, w, kh, kw int) int {
	best, at := T(math.Inf(-1)), base
	for ki := 0; ki < kh; ki++ {
		start := base + ki*w
		for kj, v := range xp[start : start+kw] {
			// NaN != NaN: a NaN always wins, as in PyTorch's kernel.
			if v > best || v != v {
				best, at = v, start+kj
			}
		}
	}
	return at
}

// maxPoolBackward scatters dOut to the recorded argmaxes of dx, adding where
// overlapping windows share one.
func maxPoolBackward[T convFloat](g poolGeom, dOut []T, arg []int32, dx []T) {
	hw, ohw := g.h*g.w, g.oh*g.ow
	clear(dx)
	for pl := range g.planes() {
		dp := dx[pl*hw : (pl+1)*hw]
		for j, i := range arg[pl*ohw : (pl+1)*ohw] {
			dp[i] += dOut[pl*ohw+j]
		}
	}
}
