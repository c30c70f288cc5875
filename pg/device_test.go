package pg_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

func TestDeviceTensor(t *testing.T) {
	d := pg.DeviceTensor(pg.Float32, 1, 0x1000, 40)
	if !d.IsDevice() || d.Len() != 10 || d.Bytes() != 40 || d.Validate() != nil {
		t.Fatalf("DeviceTensor: device %v len %d bytes %d validate %v", d.IsDevice(), d.Len(), d.Bytes(), d.Validate())
	}
	if pg.View[float32](d) != nil {
		t.Error("View of a device tensor is not nil")
	}
	s := d.Slice(2, 5)
	if m := s.Device; !s.IsDevice() || m.Ordinal != 1 || m.Ptr != 0x1008 || m.Bytes != 12 || s.Len() != 3 {
		t.Errorf("Slice(2, 5) = %+v", *s.Device)
	}
	if d.Device.Ptr != 0x1000 || d.Device.Bytes != 40 {
		t.Error("Slice changed the tensor it was taken from")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Slice(5, 11) of 10 elements did not panic")
			}
		}()
		d.Slice(5, 11)
	}()
	if h := pg.NewTensor(pg.Int32, 3); h.IsDevice() || h.Bytes() != 12 {
		t.Errorf("host tensor: device %v bytes %d", h.IsDevice(), h.Bytes())
	}
	for _, c := range []struct {
		name string
		t    pg.Tensor
		msg  string
	}{
		{"ragged", pg.DeviceTensor(pg.Float32, 0, 0x1000, 6), "whole number"},
		{"null", pg.DeviceTensor(pg.Float32, 0, 0, 8), "null pointer"},
		{"negative ordinal", pg.DeviceTensor(pg.Float32, -1, 0x1000, 8), "GPU -1"},
		{"negative bytes", pg.DeviceTensor(pg.Float32, 0, 0x1000, -4), "-4 bytes"},
		{"both", pg.Tensor{Dtype: pg.Float32, Data: make([]byte, 4), Device: &pg.DeviceMemory{Ptr: 1, Bytes: 4}}, "both"},
	} {
		if err := c.t.Validate(); !errors.Is(err, pg.ErrInvalidArgument) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: Validate = %v, want ErrInvalidArgument saying %q", c.name, err, c.msg)
		}
	}
	if err := pg.DeviceTensor(pg.Float32, 0, 0, 0).Validate(); err != nil {
		t.Errorf("an empty device tensor: %v", err)
	}
}

func TestChecksOnDeviceTensors(t *testing.T) {
	dev := pg.DeviceTensor(pg.Float32, 0, 0x1000, 16)
	dev8 := pg.DeviceTensor(pg.Float32, 0, 0x2000, 32)
	other := pg.DeviceTensor(pg.Float32, 1, 0x2000, 32)
	host := pg.NewTensor(pg.Float32, 8)
	sum := pg.Op(pg.Sum)
	type check struct {
		name string
		f    func(opts ...pg.CheckOption) error
	}
	checks := []check{
		{"allreduce", func(o ...pg.CheckOption) error { return pg.CheckAllReduce(dev, sum, o...) }},
		{"broadcast", func(o ...pg.CheckOption) error { return pg.CheckBroadcast(dev, 0, 2, o...) }},
		{"allgather", func(o ...pg.CheckOption) error { return pg.CheckAllGather(dev8, dev, 2, o...) }},
		{"reducescatter", func(o ...pg.CheckOption) error { return pg.CheckReduceScatter(dev, dev8, sum, 2, o...) }},
		{"reduce", func(o ...pg.CheckOption) error { return pg.CheckReduce(dev, 0, sum, 2, o...) }},
		{"gather", func(o ...pg.CheckOption) error { return pg.CheckGather(dev8, dev, 0, 0, 2, o...) }},
		{"gather non-root", func(o ...pg.CheckOption) error { return pg.CheckGather(pg.Tensor{}, dev, 0, 1, 2, o...) }},
		{"scatter", func(o ...pg.CheckOption) error { return pg.CheckScatter(dev, dev8, 0, 0, 2, o...) }},
		{"alltoall", func(o ...pg.CheckOption) error {
			_, _, err := pg.CheckAllToAll(dev, dev, nil, nil, 2, o...)
			return err
		}},
		{"send", func(o ...pg.CheckOption) error { return pg.CheckPeer("send", dev, 1, 0, 0, 2, o...) }},
		{"coalesced", func(o ...pg.CheckOption) error {
			return pg.CheckCoalesced("allreduce_coalesced", nil, []pg.Tensor{dev, dev8}, o...)
		}},
	}
	for _, c := range checks {
		err := c.f()
		if !errors.Is(err, pg.ErrDeviceTensor) || !errors.Is(err, pg.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "use an NCCL group or copy to host") {
			t.Errorf("%s without AcceptDevice: %v, want ErrDeviceTensor", c.name, err)
		}
		if err := c.f(pg.AcceptDevice); err != nil {
			t.Errorf("%s with AcceptDevice: %v", c.name, err)
		}
	}
	for _, c := range []check{
		{"allgather", func(o ...pg.CheckOption) error { return pg.CheckAllGather(host, dev, 2, o...) }},
		{"reducescatter", func(o ...pg.CheckOption) error { return pg.CheckReduceScatter(dev, host, sum, 2, o...) }},
		{"alltoall", func(o ...pg.CheckOption) error {
			_, _, err := pg.CheckAllToAll(host, dev, []int{1, 3}, nil, 2, o...)
			return err
		}},
		{"coalesced", func(o ...pg.CheckOption) error {
			return pg.CheckCoalesced("allgather_coalesced", []pg.Tensor{host}, []pg.Tensor{dev}, o...)
		}},
	} {
		err := c.f(pg.AcceptDevice)
		if errors.Is(err, pg.ErrDeviceTensor) || !errors.Is(err, pg.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "mixes host and device") {
			t.Errorf("%s mixing host and device: %v", c.name, err)
		}
	}
	if err := pg.CheckAllGather(other, dev, 2, pg.AcceptDevice); !errors.Is(err, pg.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "GPUs 1 and 0") && !strings.Contains(err.Error(), "GPUs 0 and 1") {
		t.Errorf("tensors on two GPUs: %v", err)
	}
	if err := pg.CheckAllReduce(host, sum); err != nil {
		t.Errorf("host tensor: %v", err)
	}
}

// A device tensor describes GPU memory the caller owns; host-only checks
// refuse it, and pg/nccl's accept it.
func ExampleDeviceTensor() {
	t := pg.DeviceTensor(pg.Float32, 0, 0x7f0000000000, 4096)
	s := t.Slice(256, 512)
	fmt.Println(t.IsDevice(), t.Len(), s.Len(), s.Device.Ptr-t.Device.Ptr)
	err := pg.CheckAllReduce(t, pg.Op(pg.Sum))
	fmt.Println(errors.Is(err, pg.ErrDeviceTensor), errors.Is(err, pg.ErrInvalidArgument))
	fmt.Println(pg.CheckAllReduce(t, pg.Op(pg.Sum), pg.AcceptDevice))
	// Output:
	// true 1024 256 1024
	// true true
	// <nil>
}
