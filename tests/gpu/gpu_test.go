package gpu_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goddp/ddp"
	"github.com/goddp/ddp/autogradhooks"
	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	pgnccl "github.com/goddp/ddp/pg/nccl"
	"github.com/goddp/ddp/pg/pgtest/testworld"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/tests/testmodel"
	"github.com/goddp/ddp/timeline"
)

// gpuGroup is a world-size-1 NCCL group on the first GPU, or a skip.
func gpuGroup(t *testing.T, ctx context.Context) (*pgnccl.Group, libnccl.Version) {
	t.Helper()
	cu, err := libnccl.LoadCUDA(libnccl.CUDAOptions{})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	if n, err := cu.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no GPU: %d devices, %v", n, err)
	}
	lib, err := libnccl.Load(libnccl.Options{Path: os.Getenv("GODDP_NCCL_LIBRARY"),
		PythonPrefixes: []string{"/opt/torch/.venv", "/usr/local", "/usr"}})
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	g, err := pgnccl.New(ctx, store.NewHashStore(store.HashStoreOptions{}),
		pgnccl.Options{Rank: 0, Size: 1, Library: lib, CUDA: cu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g, lib.Version()
}

// On a GPU: the branch model whose heads' gradients Gorgonia
// shares (fc2(h)+fc3(h)) on a world-size-1 NCCL group with device
// buckets, FindUnusedParameters and the replica check at every iteration
// (its allreduce MAX of int64 words through NCCL), and with StaticGraph:
// the stepped gradients match the plain reference and the parameters end
// bitwise equal to the same run on pg/local.
func TestGPUBranchHeadsOnNCCL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, opts := range []ddp.Options{{FindUnusedParameters: true, CheckReplicasEvery: 1}, {StaticGraph: true}} {
		g, version := gpuGroup(t, ctx)
		heads := []string{testmodel.HeadSum}
		plain := testmodel.PlainModels(t, heads)
		check := func(step int, values [][][]float64, got []map[string][]float64) {
			testmodel.CheckStepped(t, step, testmodel.ReferenceGrads(t, heads, values, step, plain), got, 1e-12)
		}
		on := []pg.ProcessGroup{g}
		dev := testmodel.BranchRun(t, ctx, testmodel.BranchCase{Heads: heads, Opts: opts, Groups: on}, check)
		host := testmodel.BranchRun(t, ctx, testmodel.BranchCase{Heads: heads, Opts: opts}, check)
		regs := dev[0].DDP.Reducer().DeviceBuckets()
		t.Logf("GPU-FACT branch heads on NCCL %v (%+v): device buckets %v, shared gradients %v", version, opts, regs,
			autogradhooks.SharedGradients(dev[0].Grads))
		if len(regs) == 0 {
			t.Error("the NCCL run kept its buckets on the host")
		}
		if p, k := testmodel.FirstBitDiff(dev[0].Values(), host[0].Values()); p >= 0 {
			t.Errorf("%s[%d] differs between NCCL and pg/local", testmodel.BranchNames()[p], k)
		}
	}
}

// On a GPU: a world-size-1 DDP run on an NCCL group (device buckets,
// registered as the loaded NCCL allows) ends with bitwise the parameters
// of the same run on pg/local. With GODDP_GPU_OUT set, the NCCL run's
// reducer timeline is written there (timeline-nccl.json). Skipped without
// a GPU or NCCL (libnccl/testdata/gpu/run.sh runs it).
func TestGPUDDPOnNCCLMatchesLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	g, version := gpuGroup(t, ctx)
	opts := fewBuckets()
	if dir := os.Getenv("GODDP_GPU_OUT"); dir != "" {
		w, err := timeline.Create(filepath.Join(dir, "timeline-nccl.json"), 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		opts.Timeline = w
	}
	spec := mlpSpec{sizes: mlpSizes(), rows: parityRows}
	data := func(step int) batch[float32] { return makeBatch[float32](spec, parityRows, uint64(100+step)) }
	train := func(g pg.ProcessGroup, opts ddp.Options) *mlp[float32] {
		m := startReplicas[float32](t, ctx, []pg.ProcessGroup{g}, spec, opts)[0]
		if err := m.train(ctx, newSolver("adam"), 3*paritySteps, data); err != nil {
			t.Fatal(err)
		}
		return m
	}
	host := train(testworld.Groups(t, "local", 1)[0], fewBuckets())
	dev := train(g, opts)
	regs := dev.ddp.Reducer().DeviceBuckets()
	t.Logf("GPU-FACT DDP on NCCL %v: device buckets %v", version, regs)
	if len(regs) == 0 {
		t.Error("DDP on an NCCL group kept its buckets on the host")
	}
	if p, i := testmodel.FirstBitDiff(dev.values(), host.values()); p >= 0 {
		t.Errorf("parameter %d element %d differs between NCCL (device buckets) and pg/local", p, i)
	}
	if err := dev.ddp.Close(); err != nil {
		t.Error(err)
	}
}
