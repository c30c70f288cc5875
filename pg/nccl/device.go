package nccl

import (
	"fmt"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
)

// Device tensors (pg.DeviceTensor) go to NCCL as they are: no staging
// buffer, no copy. The Work's stream is the group's own, so the caller's
// data must be complete on the device when the call is made (written by
// synchronous copies, or its stream synchronized); the results are on
// the device when the Work is done (Wait returned nil). The tensors must
// be on the group's GPU (Options.Device) and stay allocated until then.

// onDevice checks the tensors of a call that backend.Check* accepted with
// backend.AcceptDevice, and reports whether they are device tensors (they are
// then all on the device). what names the call for errors.
func (g *Group) onDevice(what string, ts ...pg.Tensor) (bool, error) {
	dev := false
	for _, t := range ts {
		if !t.IsDevice() {
			continue
		}
		dev = true
		if t.Device.Ordinal != g.opts.Device {
			return true, fmt.Errorf("%w: %s tensor on GPU %d but this group runs on GPU %d", pg.ErrInvalidArgument, what,
				t.Device.Ordinal, g.opts.Device)
		}
	}
	return dev, nil
}

// deviceOp refuses, on device tensors, the reductions the group does on
// the host: BAND, BOR, BXOR (NCCL has none) and PREMUL_SUM on a world of
// one (NCCL 2.28 leaves the last element of some odd counts unscaled
// there; docs/nccl.md).
func (g *Group) deviceOp(what string, op pg.ReduceOp) error {
	if bitwise(op) {
		return fmt.Errorf("%w: %s with %v on device tensors: NCCL has no bitwise reductions; use host tensors",
			pg.ErrInvalidArgument, what, op)
	}
	if g.size == 1 && op.Kind == pg.PremulSum {
		return fmt.Errorf("%w: %s with PREMUL_SUM on device tensors in a world of one: NCCL's one-rank path mis-scales "+
			"some lengths; use SUM and scale, or host tensors", pg.ErrInvalidArgument, what)
	}
	return nil
}

// dptr is the device address of t's element i.
func dptr(t pg.Tensor, i int) libnccl.DevicePtr {
	return libnccl.DevicePtr(t.Device.Ptr + uintptr(i*t.Dtype.Size()))
}

// deviceAllReduce checks a reducing call's tensors and, on the device, its op.
func (g *Group) deviceAllReduce(what string, op pg.ReduceOp, ts ...pg.Tensor) error {
	dev, err := g.onDevice(what, ts...)
	if err == nil && dev {
		err = g.deviceOp(what, op)
	}
	return err
}
