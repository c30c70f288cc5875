package pg_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
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

func ExampleDeviceTensor() {
	t := pg.DeviceTensor(pg.Float32, 0, 0x7f0000000000, 4096)
	s := t.Slice(256, 512)
	fmt.Println(t.IsDevice(), t.Len(), s.Len(), s.Device.Ptr-t.Device.Ptr)
	err := backend.CheckAllReduce(t, pg.Op(pg.Sum))
	fmt.Println(errors.Is(err, pg.ErrDeviceTensor), errors.Is(err, pg.ErrInvalidArgument))
	fmt.Println(backend.CheckAllReduce(t, pg.Op(pg.Sum), backend.AcceptDevice))
	// Output:
	// true 1024 256 1024
	// true true
	// <nil>
}
