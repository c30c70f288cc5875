package backend_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

func TestChecksOnDeviceTensors(t *testing.T) {
	dev := pg.DeviceTensor(pg.Float32, 0, 0x1000, 16)
	dev8 := pg.DeviceTensor(pg.Float32, 0, 0x2000, 32)
	other := pg.DeviceTensor(pg.Float32, 1, 0x2000, 32)
	host := pg.NewTensor(pg.Float32, 8)
	sum := pg.Op(pg.Sum)
	type check struct {
		name string
		f    func(opts ...backend.CheckOption) error
	}
	checks := []check{
		{"allreduce", func(o ...backend.CheckOption) error { return backend.CheckAllReduce(dev, sum, o...) }},
		{"broadcast", func(o ...backend.CheckOption) error { return backend.CheckBroadcast(dev, 0, 2, o...) }},
		{"allgather", func(o ...backend.CheckOption) error { return backend.CheckAllGather(dev8, dev, 2, o...) }},
		{"reducescatter",
			func(o ...backend.CheckOption) error { return backend.CheckReduceScatter(dev, dev8, sum, 2, o...) }},
		{"reduce", func(o ...backend.CheckOption) error { return backend.CheckReduce(dev, 0, sum, 2, o...) }},
		{"gather", func(o ...backend.CheckOption) error { return backend.CheckGather(dev8, dev, 0, 0, 2, o...) }},
		{"gather non-root",
			func(o ...backend.CheckOption) error { return backend.CheckGather(pg.Tensor{}, dev, 0, 1, 2, o...) }},
		{"scatter", func(o ...backend.CheckOption) error { return backend.CheckScatter(dev, dev8, 0, 0, 2, o...) }},
		{"alltoall", func(o ...backend.CheckOption) error {
			_, _, err := backend.CheckAllToAll(dev, dev, nil, nil, 2, o...)
			return err
		}},
		{"send", func(o ...backend.CheckOption) error { return backend.CheckPeer("send", dev, 1, 0, 0, 2, o...) }},
		{"coalesced", func(o ...backend.CheckOption) error {
			return backend.CheckCoalesced("allreduce_coalesced", nil, []pg.Tensor{dev, dev8}, o...)
		}},
	}
	for _, c := range checks {
		err := c.f()
		if !errors.Is(err, pg.ErrDeviceTensor) || !errors.Is(err, pg.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "use an NCCL group or copy to host") {
			t.Errorf("%s without AcceptDevice: %v, want ErrDeviceTensor", c.name, err)
		}
		if err := c.f(backend.AcceptDevice); err != nil {
			t.Errorf("%s with AcceptDevice: %v", c.name, err)
		}
	}
	for _, c := range []check{
		{"allgather", func(o ...backend.CheckOption) error { return backend.CheckAllGather(host, dev, 2, o...) }},
		{"reducescatter",
			func(o ...backend.CheckOption) error { return backend.CheckReduceScatter(dev, host, sum, 2, o...) }},
		{"alltoall", func(o ...backend.CheckOption) error {
			_, _, err := backend.CheckAllToAll(host, dev, []int{1, 3}, nil, 2, o...)
			return err
		}},
		{"coalesced", func(o ...backend.CheckOption) error {
			return backend.CheckCoalesced("allgather_coalesced", []pg.Tensor{host}, []pg.Tensor{dev}, o...)
		}},
	} {
		err := c.f(backend.AcceptDevice)
		if errors.Is(err, pg.ErrDeviceTensor) || !errors.Is(err, pg.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "mixes host and device") {
			t.Errorf("%s mixing host and device: %v", c.name, err)
		}
	}
	if err := backend.CheckAllGather(other, dev, 2, backend.AcceptDevice); !errors.Is(err, pg.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "GPUs 1 and 0") && !strings.Contains(err.Error(), "GPUs 0 and 1") {
		t.Errorf("tensors on two GPUs: %v", err)
	}
	if err := backend.CheckAllReduce(host, sum); err != nil {
		t.Errorf("host tensor: %v", err)
	}
}

// A device tensor describes GPU memory the caller owns; host-only checks
// refuse it, and pg/nccl's accept it.
