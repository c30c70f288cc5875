package libnccl

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"
)

var (
	flagLib = flag.String("nccl.lib", "",
		"libnccl.so.2 to test (default: GODDP_NCCL_LIBRARY, the search path, then PyTorch's copy)")
	flagBench = flag.Bool("nccl.bench", false, "run the algbw measurement (TestGPUAlgbw)")
)

// gpu loads NCCL and the CUDA driver and opens device 0, or skips.
type gpu struct {
	lib *Library
	cu  *CUDA
	dev *Device
}

func openGPU(t testing.TB) *gpu {
	t.Helper()
	path := *flagLib
	if path == "" {
		path = os.Getenv("GODDP_NCCL_LIBRARY") // tests may read the environment; the library does not
	}
	cu, err := LoadCUDA(CUDAOptions{})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	n, err := cu.DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("no GPU: %d devices, %v", n, err)
	}
	lib, err := Load(Options{Path: path, PythonPrefixes: []string{"/opt/torch/.venv", "/usr/local", "/usr"}})
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	dev, err := cu.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	return &gpu{lib: lib, cu: cu, dev: dev}
}

func (g *gpu) comm(t testing.TB) *Comm {
	t.Helper()
	id, err := g.lib.UniqueID()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := g.lib.CommInitRank(ctx, g.dev, 1, id, 0)
	if err != nil {
		t.Fatalf("CommInitRank(world 1): %v", err)
	}
	t.Cleanup(func() {
		if err := c.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return c
}

func (g *gpu) buf(t testing.TB, n int) DevicePtr {
	t.Helper()
	p, err := g.dev.Malloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.dev.Free(p) })
	return p
}

func (g *gpu) stream(t testing.TB) *Stream {
	t.Helper()
	s, err := g.dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Destroy() })
	return s
}

func TestGPUVersion(t *testing.T) {
	g := openGPU(t)
	t.Logf("NCCL %v (code %d) from %s; CUDA driver %d from %s", g.lib.Version(), g.lib.Version(), g.lib.Path(),
		g.cu.DriverVersion(), g.cu.Path())
	fmt.Printf("GPU-FACT nccl_version=%v nccl_path=%s cuda_driver=%d\n", g.lib.Version(), g.lib.Path(),
		g.cu.DriverVersion())
	if g.lib.Version() < MakeVersion(2, 0, 0) {
		t.Fatalf("version %d", g.lib.Version())
	}
	for r := Success; r <= Timeout; r++ {
		s := g.lib.ErrorString(r)
		if s == "" {
			t.Errorf("ncclGetErrorString(%v) is empty", r)
		}
		t.Logf("%v: %s", r, s)
	}
}

// TestGPUInitRankBlocking calls ncclCommInitRank, the blocking form whose
// ncclUniqueId argument is passed by value: a wrong ABI makes the id
// garbage and the init fail or hang (bounded by the test timeout).
func TestGPUInitRankBlocking(t *testing.T) {
	g := openGPU(t)
	id, err := g.lib.UniqueID()
	if err != nil {
		t.Fatal(err)
	}
	c := &Comm{lib: g.lib, dev: g.dev}
	var r Result
	_ = g.dev.Do(func() error { r = initRank(g.lib.fn.commInitRank, &c.h, 1, &id, 0); return nil })
	if r != Success {
		t.Fatalf("ncclCommInitRank: %v", g.lib.errorOf("ncclCommInitRank", r, 0))
	}
	n, err := c.Count()
	if err != nil || n != 1 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	checkAllReduce(t, g, c)
	if err := c.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func checkAllReduce(t *testing.T, g *gpu, c *Comm) {
	t.Helper()
	s := g.stream(t)
	const n = 1000
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i) + 0.5
	}
	src, dst := g.buf(t, 4*n), g.buf(t, 4*n)
	if err := g.dev.CopyHtoD(src, bytesOf(in)); err != nil {
		t.Fatal(err)
	}
	if err := g.dev.Memset(dst, 0xff, 4*n); err != nil {
		t.Fatal(err)
	}
	if err := c.AllReduce(src, dst, n, Float32, Sum, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	if err := g.dev.CopyDtoH(bytesOf(out), dst); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if out[i] != in[i] {
			t.Fatalf("allreduce out[%d] = %v, want %v", i, out[i], in[i])
		}
	}
}

func bytesOf[T any](s []T) []byte {
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// pattern fills n elements of dt with small distinct values.
func pattern(dt DataType, n int, seed int) []byte {
	b := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		v := float64((i*7+seed)%23) - 5
		switch dt {
		case Int8:
			b[i] = byte(int8(v))
		case Uint8:
			b[i] = byte(v + 5)
		case Int32, Uint32:
			binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v+5)))
		case Int64, Uint64:
			binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v+5)))
		case Float16:
			binary.LittleEndian.PutUint16(b[2*i:], Float32ToHalf(float32(v)))
		case BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(v))>>16))
		case Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		case Float64:
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
		}
	}
	return b
}

var allTypes = []DataType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, BFloat16}

// TestGPUCollectivesWorldOne runs every collective and data type on device
// memory out of place, with the destination filled with garbage first, so
// a collective that did not run (or ran on the wrong bytes) is caught.
// In a world of one every reduction returns its input; PreMulSum scales it.
func TestGPUCollectivesWorldOne(t *testing.T) {
	g := openGPU(t)
	c := g.comm(t)
	if !c.NonBlocking() && g.lib.Has(versionInitConfig) {
		t.Error("communicator is blocking although NCCL has ncclCommInitRankConfig")
	}
	s := g.stream(t)
	// 4096: NCCL 2.28.3's one-rank AVG/PreMulSum path leaves the tail of
	// some odd counts unscaled (TestGPUAvgTailProbe); odd counts of every
	// op are covered by pg/nccl's conformance run.
	const n = 4096
	src, dst := g.buf(t, 8*n), g.buf(t, 8*n)
	run := func(name string, dt DataType, want []byte, f func() error) {
		t.Helper()
		if err := s.Memset(dst, 0xa5, 8*n); err != nil {
			t.Fatal(err)
		}
		if err := f(); err != nil {
			t.Fatalf("%s %v: %v", name, dt, err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatalf("%s %v: sync: %v", name, dt, err)
		}
		got := make([]byte, len(want))
		if err := g.dev.CopyDtoH(got, dst); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s %v: byte %d = %#x, want %#x", name, dt, i, got[i], want[i])
			}
		}
	}
	for _, dt := range allTypes {
		in := pattern(dt, n, int(dt))
		if err := g.dev.CopyHtoD(src, in); err != nil {
			t.Fatal(err)
		}
		ops := []RedOp{Sum, Prod, Max, Min}
		if g.lib.HasAvg() {
			ops = append(ops, Avg)
		}
		for _, op := range ops {
			run(fmt.Sprintf("allreduce op %d", op), dt, in, func() error { return c.AllReduce(src, dst, n, dt, op, s) })
			run(fmt.Sprintf("reduce op %d", op), dt, in, func() error { return c.Reduce(src, dst, n, dt, op, 0, s) })
			run(fmt.Sprintf("reducescatter op %d", op), dt, in, func() error { return c.ReduceScatter(src, dst, n, dt, op, s) })
		}
		run("broadcast", dt, in, func() error { return c.Broadcast(src, dst, n, dt, 0, s) })
		run("allgather", dt, in, func() error { return c.AllGather(src, dst, n, dt, s) })
		run("send/recv to self", dt, in, func() error {
			return c.Group(func() error {
				if err := c.Send(src, n, dt, 0, s); err != nil {
					return err
				}
				return c.Recv(dst, n, dt, 0, s)
			})
		})
		switch dt {
		case Float16, Float32, Float64, BFloat16:
			op, err := c.CreatePreMulSum(2, dt)
			if err != nil {
				t.Fatal(err)
			}
			want := pattern(dt, n, int(dt))
			scaled := make([]byte, len(want))
			copy(scaled, want)
			scale(dt, scaled, 2)
			run("premulsum(2)", dt, scaled, func() error { return c.AllReduce(src, dst, n, dt, op, s) })
			if err := c.DestroyRedOp(op); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// scale multiplies every element by f; the patterns are small integers, so
// the result is exact in every float type.
func scale(dt DataType, b []byte, f float64) {
	for i := 0; i < len(b)/dt.Size(); i++ {
		switch dt {
		case Float16:
			// doubling a half adds one to its exponent (no zero/subnormal
			// in the pattern except 0 itself)
			h := binary.LittleEndian.Uint16(b[2*i:])
			if h&0x7fff != 0 {
				h += 1 << 10
			}
			binary.LittleEndian.PutUint16(b[2*i:], h)
		case BFloat16:
			v := math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v*float32(f))>>16))
		case Float32:
			v := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v*float32(f)))
		case Float64:
			v := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v*f))
		}
	}
}

// TestGPULoadFromPyTorch loads the copy of NCCL inside PyTorch's venv,
// the loader's last resort, by its directory.
func TestGPULoadFromPyTorch(t *testing.T) {
	dirs, _ := filepath.Glob("/opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib")
	if len(dirs) == 0 {
		t.Skip("no PyTorch venv with nvidia-nccl at /opt/torch/.venv")
	}
	lib, err := Load(Options{Path: dirs[0]})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("GPU-FACT pytorch_nccl_version=%v path=%s\n", lib.Version(), lib.Path())
}

func TestGPUSplit(t *testing.T) {
	g := openGPU(t)
	if !g.lib.Has(versionSplit) {
		t.Skipf("NCCL %v has no ncclCommSplit (2.18)", g.lib.Version())
	}
	c := g.comm(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := c.Split(ctx, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := sub.Count(); err != nil || n != 1 {
		t.Fatalf("split Count = %d, %v", n, err)
	}
	checkAllReduce(t, g, sub)
	if err := sub.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	none, err := c.Split(ctx, NoColor, 0)
	if err != nil || none != nil {
		t.Fatalf("Split(NoColor) = %v, %v; want nil, nil", none, err)
	}
}

func TestGPUAbortAndAsyncError(t *testing.T) {
	g := openGPU(t)
	id, _ := g.lib.UniqueID()
	c, err := g.lib.CommInitRank(context.Background(), g.dev, 1, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.AsyncError(); err != nil || r != Success {
		t.Fatalf("AsyncError on a healthy comm = %v, %v", r, err)
	}
	checkAllReduce(t, g, c)
	if err := c.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := c.Abort(); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
	if err := c.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy after Abort: %v", err)
	}
}

// TestGPUInitTimeoutAborts starts a two-rank communicator whose second
// rank never comes: the non-blocking init must give up when ctx ends and
// abort, not hang.
func TestGPUInitTimeoutAborts(t *testing.T) {
	g := openGPU(t)
	if !g.lib.Has(versionInitConfig) {
		t.Skipf("NCCL %v has no non-blocking init (2.14)", g.lib.Version())
	}
	id, _ := g.lib.UniqueID()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := g.lib.CommInitRank(ctx, g.dev, 2, id, 0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("init with a missing rank = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("abort took %v", d)
	}
	t.Logf("init with a missing rank gave up after %v: %v", time.Since(start), err)
}

func TestGPUCommInitAll(t *testing.T) {
	g := openGPU(t)
	n, _ := g.cu.DeviceCount()
	devs := []*Device{g.dev}
	for i := 1; i < n && i < 8; i++ {
		d, err := g.cu.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs = append(devs, d)
	}
	comms, err := g.lib.CommInitAll(devs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range comms {
		r, err := c.UserRank()
		if err != nil || r != i {
			t.Errorf("comm %d UserRank = %d, %v", i, r, err)
		}
		dev, err := c.CuDevice()
		if err != nil || dev != devs[i].Ordinal() {
			t.Errorf("comm %d CuDevice = %d, %v", i, dev, err)
		}
	}
	if len(comms) == 1 {
		checkAllReduce(t, g, comms[0])
	}
	for _, c := range comms {
		if err := c.Destroy(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGPUMultiRank runs an allreduce over every GPU of this machine from
// one process (CommInitAll, one grouped call per device).
func TestGPUMultiRank(t *testing.T) {
	g := openGPU(t)
	n, _ := g.cu.DeviceCount()
	if n < 2 {
		t.Skipf("multi-rank NCCL needs 2 GPUs, this machine has %d (NCCL refuses two ranks on one GPU)", n)
	}
	devs := []*Device{g.dev}
	for i := 1; i < n; i++ {
		d, err := g.cu.Device(i)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs = append(devs, d)
	}
	comms, err := g.lib.CommInitAll(devs)
	if err != nil {
		t.Fatal(err)
	}
	const m = 1 << 20
	bufs := make([]DevicePtr, n)
	streams := make([]*Stream, n)
	for i, d := range devs {
		bufs[i], _ = d.Malloc(4 * m)
		streams[i], _ = d.NewStream()
		in := make([]float32, m)
		for j := range in {
			in[j] = float32(i + 1)
		}
		if err := d.CopyHtoD(bufs[i], bytesOf(in)); err != nil {
			t.Fatal(err)
		}
	}
	err = devs[0].Do(func() error {
		if err := g.lib.GroupStart(); err != nil {
			return err
		}
		for i, c := range comms {
			if err := devs[i].Do(func() error {
				return c.lib.check("ncclAllReduce", c.h, c.lib.fn.allReduce, uintptr(bufs[i]), uintptr(bufs[i]), m,
					uintptr(Float32), uintptr(Sum), c.h, streams[i].h)
			}); err != nil {
				return err
			}
		}
		return g.lib.GroupEnd()
	})
	if err != nil {
		t.Fatal(err)
	}
	want := float32(n * (n + 1) / 2)
	for i, d := range devs {
		if err := streams[i].Synchronize(); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, m)
		if err := d.CopyDtoH(bytesOf(out), bufs[i]); err != nil {
			t.Fatal(err)
		}
		if out[0] != want || out[m-1] != want {
			t.Fatalf("device %d: %v, want %v", i, out[0], want)
		}
		_ = streams[i].Destroy()
		_ = d.Free(bufs[i])
	}
	for _, c := range comms {
		_ = c.Destroy(context.Background())
	}
}

// TestGPUAlgbw measures allreduce (world size 1, in place, float32) and a
// device-to-device copy of the same size with CUDA events, and prints
// one line per size. Run with -nccl.bench.
func TestGPUAlgbw(t *testing.T) {
	if !*flagBench {
		t.Skip("the measurement runs with -nccl.bench")
	}
	g := openGPU(t)
	c := g.comm(t)
	s := g.stream(t)
	const max = 1 << 30
	a, b := g.buf(t, max), g.buf(t, max)
	if err := g.dev.Memset(a, 0, max); err != nil {
		t.Fatal(err)
	}
	start, _ := g.dev.NewEvent(true)
	end, _ := g.dev.NewEvent(true)
	defer start.Destroy()
	defer end.Destroy()
	timeIt := func(iters int, f func() error) float64 {
		for i := 0; i < 3; i++ { // warm up
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		_ = start.Record(s)
		for i := 0; i < iters; i++ {
			if err := f(); err != nil {
				t.Fatal(err)
			}
		}
		_ = end.Record(s)
		if err := end.Synchronize(); err != nil {
			t.Fatal(err)
		}
		ms, err := end.Elapsed(start)
		if err != nil {
			t.Fatal(err)
		}
		return float64(ms) / 1e3 / float64(iters)
	}
	fmt.Printf("GPU-ALGBW %12s %12s %12s %12s %12s %12s %12s\n", "bytes", "inplace_us", "inplace_GB/s", "outplace_us",
		"outplace_GB/s", "d2d_us", "d2d_GB/s")
	for size := 1 << 10; size <= max; size <<= 2 {
		iters := 50
		if size >= 1<<26 {
			iters = 10
		}
		n := size / 4
		ti := timeIt(iters, func() error { return c.AllReduce(a, a, n, Float32, Sum, s) })
		to := timeIt(iters, func() error { return c.AllReduce(a, b, n, Float32, Sum, s) })
		td := timeIt(iters, func() error { return s.CopyDtoD(b, a, size) })
		fmt.Printf("GPU-ALGBW %12d %12.1f %12.2f %12.1f %12.2f %12.1f %12.2f\n", size, ti*1e6, float64(size)/ti/1e9,
			to*1e6, float64(size)/to/1e9, td*1e6, float64(size)/td/1e9)
	}
}

// TestGPUAvgTailProbe records which counts an out-of-place ncclAvg
// allreduce on a world of one writes completely (an NCCL 2.28.3 world-1
// float64 AVG left the last element of 4099 unwritten in our run).
func TestGPUAvgTailProbe(t *testing.T) {
	g := openGPU(t)
	c := g.comm(t)
	s := g.stream(t)
	src, dst := g.buf(t, 8*5000), g.buf(t, 8*5000)
	for _, dt := range []DataType{Float64, Float32, Int64, Int32} {
		var bad []int
		for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 4096, 4097, 4098, 4099, 4100} {
			in := pattern(dt, n, 1)
			_ = g.dev.CopyHtoD(src, in)
			_ = s.Memset(dst, 0xa5, 8*5000)
			if err := c.AllReduce(src, dst, n, dt, Avg, s); err != nil {
				t.Fatal(err)
			}
			_ = s.Synchronize()
			out := make([]byte, len(in))
			_ = g.dev.CopyDtoH(out, dst)
			if string(out) != string(in) {
				bad = append(bad, n)
			}
		}
		fmt.Printf("GPU-FACT avg_world1_outofplace dtype=%v wrong_counts=%v\n", dt, bad)
	}
}
