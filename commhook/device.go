package commhook

import (
	"fmt"

	"github.com/goddp/ddp/pg"
)

// DeviceHook is implemented by a hook that can communicate a bucket kept
// in device memory (the reducer's device buckets on an NCCL group: see
// Note [device buckets] in package reducer). goddp runs no GPU kernels of
// its own, so a device form is what the reducer can do around one
// collective: cast and divide on the host before the upload, then SUM on
// the device, or communicate nothing. The reducer asks the hook itself,
// never its name, so a user's hook gets the device path by implementing
// this; a hook that does not keeps its buckets on the host.
type DeviceHook interface {
	Hook
	// OnDevice says how the hook runs on a device bucket whose host twin
	// has dtype bucket, or, with an error, why it cannot run there and
	// what to do instead.
	OnDevice(bucket pg.Dtype) (DeviceForm, error)
}

// DeviceKind is what a hook does on a device bucket.
type DeviceKind int

const (
	// OnHost: the hook has no device form; the buckets stay on the host.
	OnHost DeviceKind = iota
	// DeviceAverage: divide by the world size, cast to Wire, and
	// SUM-allreduce on the device (Allreduce, the compression hooks).
	DeviceAverage
	// DeviceNothing: communicate nothing (Noop).
	DeviceNothing
)

// DeviceForm is a hook's form on device buckets.
type DeviceForm struct {
	Kind DeviceKind
	Wire pg.Dtype // the dtype the bucket travels and is reduced in
}

// FormOf asks h for its device form: OnHost when h is no DeviceHook.
func FormOf(h Hook, bucket pg.Dtype) (DeviceForm, error) {
	if d, ok := h.(DeviceHook); ok {
		return d.OnDevice(bucket)
	}
	return DeviceForm{}, nil
}

// OnDevice: divide, then SUM on the device in the bucket's dtype.
func (Allreduce) OnDevice(bucket pg.Dtype) (DeviceForm, error) {
	return DeviceForm{Kind: DeviceAverage, Wire: bucket}, nil
}

// OnDevice: nothing to communicate.
func (Noop) OnDevice(bucket pg.Dtype) (DeviceForm, error) {
	return DeviceForm{Kind: DeviceNothing, Wire: bucket}, nil
}

// OnDevice: the inner hook's averaging, in the compressed dtype, so half
// the bytes cross PCIe and the wire. Around an inner hook with any other
// device form (or none, or one that cannot run there) the buckets stay on
// the host.
func (c *compressed) OnDevice(bucket pg.Dtype) (DeviceForm, error) {
	f, err := FormOf(c.inner, c.dtype)
	if err != nil || f.Kind != DeviceAverage {
		return DeviceForm{}, nil
	}
	return DeviceForm{Kind: DeviceAverage, Wire: c.dtype}, nil
}

// OnDevice refuses: PowerSGD needs matrix products on the host.
func (h *PowerSGD) OnDevice(pg.Dtype) (DeviceForm, error) { return DeviceForm{}, h.c.notOnDevice() }

// OnDevice refuses: batched PowerSGD needs matrix products on the host.
func (h *BatchedPowerSGD) OnDevice(pg.Dtype) (DeviceForm, error) {
	return DeviceForm{}, h.c.notOnDevice()
}

func (c *core) notOnDevice() error {
	return fmt.Errorf("reducer: comm hook %q needs matrix products on the host and cannot run on device buckets; set "+
		"Options.HostBuckets to keep the buckets on the host", c.name)
}
