package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/pgtest"
	"github.com/goddp/ddp/pg/store"
)

// libs loads NCCL and the CUDA driver, or skips: the tests below need a
// GPU (the GPU test binary, see libnccl/testdata/gpu).
func libs(t testing.TB) (*libnccl.Library, *libnccl.CUDA, int) {
	t.Helper()
	cu, err := libnccl.LoadCUDA(libnccl.CUDAOptions{})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	n, err := cu.DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("no GPU: %d devices, %v", n, err)
	}
	lib, err := libnccl.Load(libnccl.Options{
		Path: os.Getenv("GODDP_NCCL_LIBRARY"), PythonPrefixes: []string{"/opt/torch/.venv", "/usr/local", "/usr"},
	})
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	return lib, cu, n
}

// gpuWorld makes n ranks on GPUs 0..n-1 in this process, or skips when
// the machine has fewer GPUs (NCCL refuses two ranks on one GPU).
func gpuWorld(t testing.TB, n int, timeout time.Duration) []*Group {
	t.Helper()
	return gpuWorldWith(t, n, Options{Timeout: timeout})
}

// gpuWorldWith is gpuWorld with more options: base's Rank, Size, Device,
// Library and CUDA are set for each rank.
func gpuWorldWith(t testing.TB, n int, base Options) []*Group {
	t.Helper()
	lib, cu, gpus := libs(t)
	if n > gpus {
		t.Skipf("a world of %d NCCL ranks needs %d GPUs; this machine has %d", n, n, gpus)
	}
	st := store.NewHashStore(store.HashStoreOptions{})
	gs := make([]*Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			o := base
			o.Rank, o.Size, o.Device, o.Library, o.CUDA = r, n, r, lib, cu
			gs[r], errs[r] = New(ctx, st, o)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return gs
}

func TestGPUConformance(t *testing.T) {
	libs(t)
	pgtest.RunWith(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		gs := gpuWorld(t, n, timeout)
		out := make([]pg.ProcessGroup, n)
		for i, g := range gs {
			out[i] = g
		}
		return out
	}, pgtest.Options{OrderedPointToPoint: true, UncheckedAllToAllSplits: true})
}

// TestGPUWatchdogTimeout injects a timeout on a real communicator: a
// group timeout far shorter than a 256 MiB staged allreduce. The
// watchdog must fail the Work with pg.ErrTimeout naming it, abort the
// communicator with ncclCommAbort, and Close must still release
// everything.
func TestGPUWatchdogTimeout(t *testing.T) {
	gs := gpuWorld(t, 1, time.Microsecond)
	g := gs[0]
	rec, err := flight.Wrap(g, flight.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 64<<20)
	x[0] = 42
	err = waitErr(t, rec.AllReduce(context.Background(), pg.Float32s(x), pg.Op(pg.Sum)), time.Minute)
	if !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("%v, want a timeout", err)
	}
	t.Logf("injected timeout: %v", err)
	if x[0] != 42 {
		t.Fatal("the failed allreduce wrote the caller's tensor")
	}
	if err := waitErr(t, g.Barrier(context.Background()), time.Second); !errors.Is(err, pg.ErrTimeout) {
		t.Fatalf("after the failure: %v", err)
	}
	if fr := g.FlightRecorder().Snapshot().Entries; len(fr) != 1 || fr[0].State == "completed" || !fr[0].Retired {
		t.Fatalf("flight recorder %+v", fr)
	}
	start := time.Now()
	if err := g.Close(); err != nil {
		t.Logf("Close after abort: %v", err)
	}
	t.Logf("Close after abort took %v", time.Since(start))
}

func TestGPUAbort(t *testing.T) {
	gs := gpuWorld(t, 1, time.Minute)
	g := gs[0]
	defer g.Close()
	x := make([]float32, 16<<20)
	w := g.AllReduce(context.Background(), pg.Float32s(x), pg.Op(pg.Sum))
	g.Abort(errors.New("test abort"))
	err := waitErr(t, w, time.Minute)
	if err != nil && !errors.Is(err, pg.ErrAborted) {
		t.Fatalf("%v", err)
	}
	t.Logf("allreduce racing Abort: %v", err)
	if err := waitErr(t, g.Barrier(context.Background()), time.Second); !errors.Is(err, pg.ErrAborted) {
		t.Fatalf("after Abort: %v", err)
	}
}

func TestGPUSplit(t *testing.T) {
	gs := gpuWorld(t, 1, time.Minute)
	defer gs[0].Close()
	sub, err := gs[0].Split(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	x := []float32{3}
	if err := waitErr(t, sub.AllReduce(context.Background(), pg.Float32s(x), pg.Op(pg.Avg)), time.Minute); err != nil ||
		x[0] != 3 {
		t.Fatal(err, x)
	}
	none, err := gs[0].Split(context.Background(), pg.NoColor, 0)
	if err != nil || none != nil {
		t.Fatal(none, err)
	}
}

// TestGPUStagedBandwidth prints the time of a host-tensor allreduce
// through the staging path (copy to pinned, H2D, ncclAllReduce, D2H, copy
// back) for sizes up to 1 GiB, world size 1.
func TestGPUStagedBandwidth(t *testing.T) {
	if testing.Short() {
		t.Skip("not under -short")
	}
	gs := gpuWorld(t, 1, 5*time.Minute)
	defer gs[0].Close()
	fmt.Printf("PGNCCL-STAGED %12s %12s %12s\n", "bytes", "us", "GB/s")
	for size := 1 << 10; size <= 1<<30; size <<= 4 {
		x := make([]float32, size/4)
		iters := 20
		if size >= 1<<26 {
			iters = 3
		}
		_ = waitErr(t, gs[0].AllReduce(context.Background(), pg.Float32s(x), pg.Op(pg.Sum)), time.Minute)
		start := time.Now()
		for i := 0; i < iters; i++ {
			if err := waitErr(t, gs[0].AllReduce(context.Background(), pg.Float32s(x), pg.Op(pg.Sum)), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		d := time.Since(start).Seconds() / float64(iters)
		fmt.Printf("PGNCCL-STAGED %12d %12.1f %12.2f\n", size, d*1e6, float64(size)/d/1e9)
	}
}
