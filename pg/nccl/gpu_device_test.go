package nccl

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
)

// gpuDevice opens GPU 0 beside a world of one, for the caller's own device
// memory.
func gpuDevice(t testing.TB) (*Group, *libnccl.Device) {
	t.Helper()
	gs := gpuWorld(t, 1, time.Minute)
	_, cu, _ := libs(t)
	d, err := cu.Device(0)
	if err != nil {
		gs[0].Close()
		t.Fatal(err)
	}
	return gs[0], d
}

// devFloats allocates device memory holding xs (a synchronous copy, so
// the data is complete on the device before any call).
func devFloats(t testing.TB, d *libnccl.Device, xs []float32) pg.Tensor {
	t.Helper()
	n := 4 * len(xs)
	p, err := d.Malloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Free(p) })
	if err := d.CopyHtoD(p, pg.Float32s(xs).Data); err != nil {
		t.Fatal(err)
	}
	return pg.DeviceTensor(pg.Float32, d.Ordinal(), uintptr(p), n)
}

func hostFloats(t testing.TB, d *libnccl.Device, x pg.Tensor) []float32 {
	t.Helper()
	out := make([]float32, x.Len())
	if err := d.CopyDtoH(pg.Float32s(out).Data, libnccl.DevicePtr(x.Device.Ptr)); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGPUDeviceTensors runs every collective on device tensors on a world
// of one and checks the results by copying them back.
func TestGPUDeviceTensors(t *testing.T) {
	g, d := gpuDevice(t)
	defer d.Close()
	defer g.Close()
	ctx := context.Background()
	check := func(what string, w pg.Work, x pg.Tensor, want []float32) {
		t.Helper()
		if err := waitErr(t, w, 30*time.Second); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got := hostFloats(t, d, x)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: %v, want %v", what, got, want)
			}
		}
	}
	in := []float32{1, 2, 3, 4, 5, 6, 7}
	x := devFloats(t, d, in)
	check("allreduce sum", g.AllReduce(ctx, x, pg.Op(pg.Sum)), x, in)
	check("allreduce avg", g.AllReduce(ctx, x, pg.Op(pg.Avg)), x, in)
	check("allreduce max slice", g.AllReduce(ctx, x.Slice(2, 5), pg.Op(pg.Max)), x, in)
	check("broadcast", g.Broadcast(ctx, x, 0), x, in)
	check("reduce", g.Reduce(ctx, x, 0, pg.Op(pg.Min)), x, in)
	for _, c := range []struct {
		name string
		f    func(out pg.Tensor) pg.Work
	}{
		{"allgather", func(out pg.Tensor) pg.Work { return g.AllGather(ctx, out, x) }},
		{"reducescatter", func(out pg.Tensor) pg.Work { return g.ReduceScatter(ctx, out, x, pg.Op(pg.Sum)) }},
		{"gather", func(out pg.Tensor) pg.Work { return g.Gather(ctx, out, x, 0) }},
		{"scatter", func(out pg.Tensor) pg.Work { return g.Scatter(ctx, out, x, 0) }},
		{"alltoall", func(out pg.Tensor) pg.Work { return g.AllToAll(ctx, out, x, nil, nil) }},
		{"allgather_coalesced", func(out pg.Tensor) pg.Work {
			return g.AllGatherCoalesced(ctx, []pg.Tensor{out}, []pg.Tensor{x})
		}},
		{"reducescatter_coalesced", func(out pg.Tensor) pg.Work {
			return g.ReduceScatterCoalesced(ctx, []pg.Tensor{out}, []pg.Tensor{x}, pg.Op(pg.Sum))
		}},
	} {
		out := devFloats(t, d, make([]float32, len(in)))
		check(c.name, c.f(out), out, in)
	}
	// 4097 float32s: a length whose last element NCCL's one-rank
	// out-of-place AVG left unscaled (docs/nccl.md).
	odd := make([]float32, 4097)
	for i := range odd {
		odd[i] = float32(i%13) + 0.5
	}
	xo, oo := devFloats(t, d, odd), devFloats(t, d, make([]float32, len(odd)))
	check("reducescatter avg 4097", g.ReduceScatter(ctx, oo, xo, pg.Op(pg.Avg)), oo, odd)
	if err := waitErr(t, g.AllReduce(ctx, xo, pg.PremulSumOp(0.5)), 10*time.Second); err == nil {
		t.Fatal("PREMUL_SUM on a device tensor in a world of one succeeded; want it refused")
	}
	y := devFloats(t, d, []float32{9, 8})
	check("allreduce_coalesced", g.AllReduceCoalesced(ctx, []pg.Tensor{x, y}, pg.Op(pg.Sum)), y, []float32{9, 8})
	h := pg.Float32s(make([]float32, len(in)))
	if err := waitErr(t, g.AllGather(ctx, h, x), 10*time.Second); err == nil {
		t.Fatal("allgather of a device tensor into a host tensor succeeded; want it refused")
	}
}

// TestGPUDeviceBandwidth prints allreduce times on device tensors (in
// place through AllReduce, out of place through the same issue path), the
// staged host path and a device-to-device copy, world size 1.
func TestGPUDeviceBandwidth(t *testing.T) {
	if testing.Short() {
		t.Skip("not under -short")
	}
	g, d := gpuDevice(t)
	defer d.Close()
	defer g.Close()
	ctx := context.Background()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	timeIt := func(iters int, f func() error) float64 {
		if err := f(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := 0; i < iters; i++ {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start).Seconds() / float64(iters)
	}
	fmt.Printf("PGNCCL-DEVICE %12s %14s %14s %14s %14s  (us; GB/s = bytes/time)\n", "bytes", "dev-inplace", "dev-outplace",
		"host-staged", "d2d-copy")
	for _, size := range []int{1 << 20, 1 << 26, 1 << 30} {
		iters := 50
		if size >= 1<<26 {
			iters = 10
		}
		if size >= 1<<30 {
			iters = 3
		}
		src, err := d.Malloc(size)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := d.Malloc(size)
		if err != nil {
			t.Fatal(err)
		}
		_ = d.Memset(src, 0, size)
		_ = d.Memset(dst, 0, size)
		x := pg.DeviceTensor(pg.Float32, 0, uintptr(src), size)
		in := timeIt(iters, func() error { return waitErr(t, g.AllReduce(ctx, x, pg.Op(pg.Sum)), time.Minute) })
		out := timeIt(iters, func() error {
			return waitErr(t,
				g.issue(ctx,
					desc{op: pg.OpAllReduce, peer: pg.NoPeer, dtype: pg.Float32, inBytes: int64(size), outBytes: int64(size)},
					func(s *stager) ([]part, error) {
						return []part{{comm: func() error { return g.be.AllReduce(src, dst, size/4, libnccl.Float32, libnccl.Sum) }}}, nil
					}), time.Minute)
		})
		h := pg.NewTensor(pg.Float32, size/4)
		staged := timeIt(iters, func() error { return waitErr(t, g.AllReduce(ctx, h, pg.Op(pg.Sum)), time.Minute) })
		cp := timeIt(iters, func() error {
			if err := s.CopyDtoD(dst, src, size); err != nil {
				return err
			}
			return s.Synchronize()
		})
		gb := func(sec float64) string { return fmt.Sprintf("%8.0f/%5.1f", sec*1e6, float64(size)/sec/1e9) }
		fmt.Printf("PGNCCL-DEVICE %12d %14s %14s %14s %14s\n", size, gb(in), gb(out), gb(staged), gb(cp))
		_ = d.Free(src)
		_ = d.Free(dst)
	}
}
