package nccl

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/internal/fake"
)

// fakeDev copies xs into the fake's device memory.
func fakeDev(be *fake.Backend, xs []float32) pg.Tensor {
	n := 4 * len(xs)
	p := be.Alloc(n)
	copy(be.At(p, n), pg.Float32s(xs).Data)
	return pg.DeviceTensor(pg.Float32, 0, uintptr(p), n)
}

// fakeHost reads a fake device tensor back.
func fakeHost(be *fake.Backend, t pg.Tensor) []float32 {
	b := append([]byte(nil), be.At(ptrOf(t), t.Bytes())...)
	return pg.View[float32](pg.Tensor{Dtype: pg.Float32, Data: b})
}

func ptrOf(t pg.Tensor) libnccl.DevicePtr { return libnccl.DevicePtr(t.Device.Ptr) }

func TestDeviceTensorsOverFake(t *testing.T) {
	const n = 3
	gs, bes := fakeWorld(t, n, 10*time.Second)
	defer closeAll(t, gs)
	ctx := context.Background()
	run := func(what string, f func(r int, g *Group) pg.Work) {
		t.Helper()
		ws := make([]pg.Work, n)
		for r, g := range gs {
			ws[r] = f(r, g)
		}
		for r, w := range ws {
			if err := waitErr(t, w, 10*time.Second); err != nil {
				t.Fatalf("%s: rank %d: %v", what, r, err)
			}
		}
	}
	want := func(what string, r int, got, w []float32) {
		t.Helper()
		if len(got) != len(w) {
			t.Fatalf("%s rank %d: %d elements, want %d", what, r, len(got), len(w))
		}
		for i := range w {
			if got[i] != w[i] {
				t.Fatalf("%s rank %d: %v, want %v", what, r, got, w)
			}
		}
	}
	before := make([]int, n)
	for r, g := range gs {
		before[r] = g.pool.allocated()
	}
	ts := make([]pg.Tensor, n)
	outs := make([]pg.Tensor, n)

	run("allreduce", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{float32(r), 1, 2})
		return g.AllReduce(ctx, ts[r], pg.Op(pg.Sum))
	})
	for r := range gs {
		want("allreduce", r, fakeHost(bes[r], ts[r]), []float32{3, 3, 6})
	}
	run("broadcast", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{float32(r), float32(r)})
		return g.Broadcast(ctx, ts[r], 2)
	})
	for r := range gs {
		want("broadcast", r, fakeHost(bes[r], ts[r]), []float32{2, 2})
	}
	run("allgather", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{float32(r), 10 + float32(r)})
		outs[r] = fakeDev(bes[r], make([]float32, 2*n))
		return g.AllGather(ctx, outs[r], ts[r])
	})
	for r := range gs {
		want("allgather", r, fakeHost(bes[r], outs[r]), []float32{0, 10, 1, 11, 2, 12})
	}
	run("reducescatter", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{1, 2, 3, 4, 5, 6})
		outs[r] = fakeDev(bes[r], make([]float32, 2))
		return g.ReduceScatter(ctx, outs[r], ts[r], pg.Op(pg.Sum))
	})
	for r := range gs {
		want("reducescatter", r, fakeHost(bes[r], outs[r]), []float32{3 * float32(2*r+1), 3 * float32(2*r+2)})
	}
	run("reduce", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{float32(r + 1)})
		return g.Reduce(ctx, ts[r], 1, pg.Op(pg.Max))
	})
	want("reduce", 1, fakeHost(bes[1], ts[1]), []float32{3})
	run("gather", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{float32(r), 7})
		if r == 0 {
			outs[r] = fakeDev(bes[r], make([]float32, 2*n))
		} else {
			outs[r] = pg.Tensor{}
		}
		return g.Gather(ctx, outs[r], ts[r], 0)
	})
	want("gather", 0, fakeHost(bes[0], outs[0]), []float32{0, 7, 1, 7, 2, 7})
	run("scatter", func(r int, g *Group) pg.Work {
		outs[r] = fakeDev(bes[r], make([]float32, 1))
		ts[r] = pg.Tensor{}
		if r == 2 {
			ts[r] = fakeDev(bes[r], []float32{5, 6, 7})
		}
		return g.Scatter(ctx, outs[r], ts[r], 2)
	})
	for r := range gs {
		want("scatter", r, fakeHost(bes[r], outs[r]), []float32{float32(5 + r)})
	}
	run("alltoall", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{float32(10 * r), float32(10*r + 1), float32(10*r + 2)})
		outs[r] = fakeDev(bes[r], make([]float32, n))
		return g.AllToAll(ctx, outs[r], ts[r], nil, nil)
	})
	for r := range gs {
		want("alltoall", r, fakeHost(bes[r], outs[r]), []float32{float32(r), float32(10 + r), float32(20 + r)})
	}
	ts2 := make([]pg.Tensor, n)
	run("allreduce_coalesced", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{1, 2})
		ts2[r] = fakeDev(bes[r], []float32{float32(r)})
		return g.AllReduceCoalesced(ctx, []pg.Tensor{ts[r], ts2[r]}, pg.Op(pg.Sum))
	})
	for r := range gs {
		want("allreduce_coalesced", r, fakeHost(bes[r], ts[r]), []float32{3, 6})
		want("allreduce_coalesced", r, fakeHost(bes[r], ts2[r]), []float32{3})
	}
	run("slice", func(r int, g *Group) pg.Work {
		ts[r] = fakeDev(bes[r], []float32{1, 1, 1, 1})
		return g.AllReduce(ctx, ts[r].Slice(1, 3), pg.Op(pg.Sum))
	})
	for r := range gs {
		want("slice", r, fakeHost(bes[r], ts[r]), []float32{1, 3, 3, 1})
	}
	for r, g := range gs {
		if got := g.pool.allocated(); got != before[r] {
			t.Fatalf("rank %d: device tensors made %d staging buffers, want none", r, got-before[r])
		}
	}
	// Send/Recv: device to device (0 -> 1) and device to host (1 -> 2),
	// 100 float32s: a device payload needs no staging buffer, only the
	// lane's 16-byte size header (pool class 256 < 400 bytes).
	seq100 := func(base float32) []float32 { return seqFloats(100, base) }
	dst := fakeDev(bes[1], make([]float32, 100))
	hostBuf := make([]float32, 100)
	ws := []pg.Work{
		gs[0].Send(ctx, fakeDev(bes[0], seq100(1)), 1, 0),
		gs[1].Recv(ctx, dst, 0, 0),
		gs[1].Send(ctx, fakeDev(bes[1], seq100(2)), 2, 0),
		gs[2].Recv(ctx, pg.Float32s(hostBuf), 1, 0),
	}
	for i, w := range ws {
		if err := waitErr(t, w, 10*time.Second); err != nil {
			t.Fatalf("send/recv %d: %v", i, err)
		}
	}
	want("recv on device", 1, fakeHost(bes[1], dst), seq100(1))
	want("recv on host", 2, hostBuf, seq100(2))
	for r, g := range gs[:2] {
		g.pool.mu.Lock()
		for _, b := range g.pool.all {
			if b.size >= 400 {
				t.Errorf("rank %d: a device send/recv made a %d-byte staging buffer", r, b.size)
			}
		}
		g.pool.mu.Unlock()
	}
}

func TestDeviceTensorRefusals(t *testing.T) {
	gs, bes := fakeWorld(t, 1, 10*time.Second)
	defer closeAll(t, gs)
	g, ctx := gs[0], context.Background()
	d := fakeDev(bes[0], []float32{1, 2})
	h := pg.Float32s([]float32{0, 0})
	for _, c := range []struct {
		name, msg string
		w         pg.Work
	}{
		{"mixed", "mixes host and device", g.AllGather(ctx, h, d)},
		{"mixed coalesced", "mixes host and device", g.AllReduceCoalesced(ctx, []pg.Tensor{h, d}, pg.Op(pg.Sum))},
		{"other GPU", "GPU 3", g.AllReduce(ctx, pg.DeviceTensor(pg.Float32, 3, 1<<32, 8), pg.Op(pg.Sum))},
		{"bitwise", "bitwise", g.AllReduce(ctx, pg.DeviceTensor(pg.Int32, 0, d.Device.Ptr, 8), pg.Op(pg.Bxor))},
		{"premul world 1", "PREMUL_SUM", g.AllReduce(ctx, d, pg.PremulSumOp(0.5))},
		{"null", "null pointer", g.Broadcast(ctx, pg.DeviceTensor(pg.Float32, 0, 0, 8), 0)},
		{"both", "both host bytes and device",
			g.AllReduce(ctx, pg.Tensor{Dtype: pg.Float32, Data: h.Data, Device: d.Device}, pg.Op(pg.Sum))},
	} {
		err := waitErr(t, c.w, 5*time.Second)
		if !errors.Is(err, pg.ErrInvalidArgument) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want ErrInvalidArgument saying %q", c.name, err, c.msg)
		}
	}
}
