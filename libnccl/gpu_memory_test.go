package libnccl

import (
	"encoding/binary"
	"math"
	"testing"
)

// On a GPU: ncclMemAlloc, a symmetric window and a user registration
// around an allreduce, and a copy stream whose event the collective's
// stream waits on. Each part the library lacks is logged and skipped.
func TestGPURegistration(t *testing.T) {
	g := openGPU(t)
	c := g.comm(t)
	const n = 1 << 20
	t.Logf("GPU-FACT nccl %v memalloc=%v register=%v windows=%v", g.lib.Version(), g.lib.HasMemAlloc(),
		g.lib.HasRegister(), g.lib.HasWindows())
	var p DevicePtr
	if g.lib.HasMemAlloc() {
		var err error
		if p, err = g.lib.MemAlloc(g.dev, n*4); err != nil {
			t.Fatalf("ncclMemAlloc: %v", err)
		}
		defer func() {
			if err := g.lib.MemFree(g.dev, p); err != nil {
				t.Errorf("ncclMemFree: %v", err)
			}
		}()
	} else {
		p = g.buf(t, n*4)
	}
	if g.lib.HasWindows() {
		w, err := c.WindowRegister(p, n*4, WinCollSymmetric)
		if err != nil {
			t.Logf("GPU-FACT window registration failed: %v", err)
		} else {
			defer func() {
				if err := c.WindowDeregister(w); err != nil {
					t.Errorf("ncclCommWindowDeregister: %v", err)
				}
			}()
		}
	} else if g.lib.HasRegister() {
		r, err := c.Register(p, n*4)
		if err != nil {
			t.Fatalf("ncclCommRegister: %v", err)
		}
		defer func() {
			if err := c.Deregister(r); err != nil {
				t.Errorf("ncclCommDeregister: %v", err)
			}
		}()
	}
	host, err := g.dev.MallocHost(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer g.dev.FreeHost(host)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32(i%1000)))
	}
	copyS, collS := g.stream(t), g.stream(t)
	ev, err := g.dev.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	if err := copyS.CopyHtoD(p, host); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(copyS); err != nil {
		t.Fatal(err)
	}
	if err := collS.WaitEvent(ev); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(p, p, n, Float32, Sum, collS); err != nil {
		t.Fatal(err)
	}
	clear(host)
	if err := collS.CopyDtoH(host, p); err != nil {
		t.Fatal(err)
	}
	if err := collS.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 999, n - 1} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(host[4*i:])); got != float32(i%1000) {
			t.Fatalf("element %d = %v after a world-of-one allreduce, want %v", i, got, float32(i%1000))
		}
	}
}
