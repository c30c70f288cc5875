package ddp

import (
	"fmt"

	"github.com/goddp/ddp/gtensor"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/reducer"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Note [bucket views in Gorgonia]
//
// torch's gradient_as_bucket_view makes each param.grad a view into its
// bucket, so autograd accumulates straight into bucket memory. Gorgonia
// v0.9.18's TapeMachine cannot be made to compute an op's result into
// memory the caller chooses:
//
//   - Reset sets every register to nil, so each run starts with no values.
//   - An op that calls BLAS (MatMul, MatVec, Outer: the weight gradients)
//     gets an alloc instruction that makes a new tensor in its register
//     each run (alloc.exec allocates when the register is nil), and then
//     UsePreallocDo writes into that. The register is unexported; nothing
//     can seed it.
//   - Every other op calls Do, which allocates its result, or UnsafeDo,
//     which overwrites one of its own inputs (never caller memory).
//   - Let and UnsafeLet bind a value to the node, but the tape reads and
//     writes registers: the op's exec binds its fresh result over it.
//   - Several contributions to one gradient (a parameter used twice) are
//     summed by Add nodes that Backpropagate creates, which allocate too.
//
// So no Gorgonia op writes a gradient into a bucket. What can be done, and
// is, is to move it there once: the gradient hook (autogradhooks.PlaceFunc)
// copies the fresh gradient into its bucket view (adds it, inside a no_sync
// window) and makes that view the hook node's output, so params[i].Grad()
// is bucket memory. The reducer then sees the gradient already in place
// and copies nothing, and Finalize copies nothing back: of DDP's two
// copies per gradient (into the bucket, out of it) one is left, fused with
// the hook. A gradient that is not a dense float tensor (a scalar
// parameter's *F32/*F64) keeps the copying path; the reducer counts those
// in CopyStats().Fallbacks.

// placeGradient is the gradient hook with GradientAsBucketView: it puts
// parameter i's fresh gradient v into its bucket view, hands the view to
// the reducer, and returns it as the gradient's Value from now on.
func (d *DDP) placeGradient(i int, v gorgonia.Value) (gorgonia.Value, error) {
	src, err := gtensor.TensorOf(v)
	if err != nil {
		return nil, fmt.Errorf("%w: parameter %d: %v", reducer.ErrBadGradient, i, err)
	}
	dense, ok := v.(*tensor.Dense)
	buf := d.r.GradientBuffer(i)
	if !ok || dense.IsScalar() || src.Dtype != buf.Dtype || len(src.Data) != len(buf.Data) {
		return nil, d.r.MarkReady(i, src) // the copying path; MarkReady checks and counts it
	}
	if d.r.Accumulating() {
		if err := backend.Add(buf, src); err != nil {
			return nil, err
		}
	} else {
		copy(buf.Data, src.Data)
	}
	d.placed.Add(int64(len(buf.Data)))
	view := d.views[i]
	if view == nil || !gtensor.SameMemory(view, buf) || !view.Shape().Eq(dense.Shape()) {
		if view, err = gtensor.DenseOn(buf, dense.Shape()); err != nil {
			return nil, err
		}
		d.views[i] = view
	}
	if err := d.r.MarkReady(i, buf); err != nil {
		return nil, err
	}
	return view, nil
}

// PlacedBytes is the number of gradient bytes the hooks have copied into
// bucket views since Wrap (GradientAsBucketView only): the one copy per
// gradient that Gorgonia leaves (Note [bucket views in Gorgonia]). The
// reducer's own copies are in Reducer().CopyStats().
func (d *DDP) PlacedBytes() int64 { return d.placed.Load() }
