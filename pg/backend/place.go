package backend

import (
	"fmt"

	"github.com/goddp/ddp/pg"
)

// CheckOption changes what the Check functions accept.
type CheckOption uint8

// AcceptDevice lets the Check functions accept device tensors, for a
// backend that runs on device memory (pg/nccl). They still refuse a call
// that mixes host and device tensors, or tensors on different GPUs.
// Without it, a device tensor is refused with pg.ErrDeviceTensor.
const AcceptDevice CheckOption = 1

func accepts(opts []CheckOption, o CheckOption) bool {
	for _, x := range opts {
		if x&o != 0 {
			return true
		}
	}
	return false
}

// checkPlace checks where the tensors of one call live: all on the host,
// or (with AcceptDevice) all on one GPU.
func checkPlace(what string, opts []CheckOption, ts ...pg.Tensor) error {
	host, dev := 0, 0
	ord := -1
	for _, t := range ts {
		if !t.IsDevice() {
			host++
			continue
		}
		dev++
		if ord >= 0 && t.Device.Ordinal != ord {
			return fmt.Errorf("%w: %s has tensors on GPUs %d and %d; use one GPU per rank", pg.ErrInvalidArgument, what, ord,
				t.Device.Ordinal)
		}
		ord = t.Device.Ordinal
	}
	switch {
	case dev == 0:
		return nil
	case !accepts(opts, AcceptDevice):
		return fmt.Errorf("%s: %w", what, pg.ErrDeviceTensor)
	case host > 0:
		return fmt.Errorf("%w: %s mixes host and device tensors; put them all on the host or all on the GPU",
			pg.ErrInvalidArgument, what)
	}
	return nil
}
