package layers

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Note [buffers owned by the op]
//
// Gorgonia's tape machine calls UsePreallocDo only for an instruction whose
// op CallsExtern (after an Alloc instruction, which allocates afresh after
// every Reset, since Reset clears every register) or whose output register
// already holds a Value in this run (an op that OverwritesInput, given its
// input's register); otherwise it calls Do (vm_tape_nocuda.go, execOp.exec,
// and regalloc.go in v0.9.18). Reset clears the registers before every
// step, so the registers cannot carry a buffer from one step to the next.
// Each op here therefore owns its output and scratch buffers, allocated on
// the node's first run and reused by every later one; UsePreallocDo writes
// into the register it is given when that fits and shares no memory with an
// input (ownBuf.pick, the rule of Note [output buffers]), so no path
// allocates per step. The ops neither call externs nor overwrite their inputs, so they
// always get a register of their own and Do is the path taken.
//
// A node's op is its own (Conv2d and SymDiff create a fresh op per node),
// so two nodes never share a buffer. A graph is run by one machine at a
// time, as Gorgonia requires anyway.

// convOp is the forward convolution: inputs x, w and optionally b.
type convOp struct {
	pointerOp
	geom        convGeom
	dt          tensor.Dtype
	bias        bool
	noInputGrad bool

	// The shapes of x, w, b and the output, made once: a shape literal per
	// call would escape to the heap through the error messages.
	xShape, wShape, bShape, yShape tensor.Shape

	out  ownBuf
	cols any // []float32 or []float64: n column matrices of k×p, read by the filter gradient
	// ran is set once cols holds the column matrices of a forward run.
	ran bool
}

func (op *convOp) Arity() int {
	if op.bias {
		return 3
	}
	return 2
}

func (op *convOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	t4 := gorgonia.TensorType{Dims: 4, Of: a}
	if op.bias {
		return hm.NewFnType(t4, t4, gorgonia.TensorType{Dims: 1, Of: a}, t4)
	}
	return hm.NewFnType(t4, t4, t4)
}

func newConvOp(g convGeom, dt tensor.Dtype, bias, noInputGrad bool) *convOp {
	return &convOp{geom: g, dt: dt, bias: bias, noInputGrad: noInputGrad,
		xShape: tensor.Shape{g.n, g.c, g.h, g.w}, wShape: tensor.Shape{g.o, g.c, g.kh, g.kw},
		bShape: tensor.Shape{g.o}, yShape: tensor.Shape{g.n, g.o, g.oh, g.ow}}
}

func (op *convOp) outShape() tensor.Shape { return op.yShape }

func (op *convOp) InferShape(...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.outShape().Clone(), nil
}

func (op *convOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) { return op.run(nil, in) }

func (op *convOp) UsePreallocDo(prealloc gorgonia.Value, in ...gorgonia.Value) (gorgonia.Value, error) {
	return op.run(prealloc, in)
}

func (op *convOp) run(prealloc gorgonia.Value, in []gorgonia.Value) (gorgonia.Value, error) {
	const fn = "layers.Conv2d"
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("%s: %d inputs; want %d", fn, len(in), op.Arity())
	}
	g := op.geom
	x, err := denseArg(fn, 0, in[0], op.xShape, op.dt)
	if err != nil {
		return nil, err
	}
	w, err := denseArg(fn, 1, in[1], op.wShape, op.dt)
	if err != nil {
		return nil, err
	}
	var b *tensor.Dense
	if op.bias {
		if b, err = denseArg(fn, 2, in[2], op.bShape, op.dt); err != nil {
			return nil, err
		}
	}
	out := op.out.pick(prealloc, op.dt, op.outShape(), inputs{x, w, b})
	n := g.n * g.k() * g.p()
	switch op.dt {
	case tensor.Float32:
		var bs []float32
		if b != nil {
			bs = b.Float32s()
		}
		convForward(g, x.Float32s(), w.Float32s(), bs, scratch[float32](&op.cols, n), out.Float32s())
	default:
		var bs []float64
		if b != nil {
			bs = b.Float64s()
		}
		convForward(g, x.Float64s(), w.Float64s(), bs, scratch[float64](&op.cols, n), out.Float64s())
	}
	op.ran = true
	return out, nil
}

// scratch returns *buf as a []T of length n, allocating it on first use.
func scratch[T convFloat](buf *any, n int) []T {
	if s, ok := (*buf).([]T); ok && len(s) == n {
		return s
	}
	s := make([]T, n)
	*buf = s
	return s
}

func (op *convOp) WriteHash(h hash.Hash) {
	g := op.geom
	fmt.Fprintf(h, "layers.Conv2d{pad=%d,%d stride=%d,%d bias=%t noInputGrad=%t}", g.padH, g.padW, g.strH, g.strW,
		op.bias, op.noInputGrad)
}

func (op *convOp) Hashcode() uint32 { return hashOf(op) }

func (op *convOp) String() string {
	g := op.geom
	return fmt.Sprintf("Conv2d{pad=%d,%d stride=%d,%d}", g.padH, g.padW, g.strH, g.strW)
}

// DiffWRT says x is differentiable unless NoInputGrad; Gorgonia's
// forwardDiffAnalysis and Backpropagate then neither follow x nor keep a
// gradient for it, and SymDiff builds none.
func (op *convOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	for i := range d {
		d[i] = true
	}
	if op.noInputGrad && inputs > 0 {
		d[0] = false
	}
	return d
}

// SymDiff returns the gradients of x (nil with NoInputGrad), w and b, each
// an op of this package reading grad, the gradient of the output.
func (op *convOp) SymDiff(inputs gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if len(inputs) != op.Arity() {
		return nil, fmt.Errorf("layers.Conv2d: SymDiff got %d inputs; want %d", len(inputs), op.Arity())
	}
	out := make(gorgonia.Nodes, len(inputs))
	var err error
	if !op.noInputGrad {
		if out[0], err = gorgonia.ApplyOp(&convInputGradOp{fwd: op}, inputs[1], grad); err != nil {
			return nil, fmt.Errorf("layers.Conv2d: input gradient: %w", err)
		}
	}
	if out[1], err = gorgonia.ApplyOp(&convFilterGradOp{fwd: op}, grad); err != nil {
		return nil, fmt.Errorf("layers.Conv2d: filter gradient: %w", err)
	}
	if op.bias {
		if out[2], err = gorgonia.ApplyOp(&convBiasGradOp{fwd: op}, grad); err != nil {
			return nil, fmt.Errorf("layers.Conv2d: bias gradient: %w", err)
		}
	}
	return out, nil
}

// hashOf hashes an op by its WriteHash.
func hashOf(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}
