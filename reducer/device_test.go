package reducer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/instrument"
	"github.com/goddp/ddp/pg/nccl/nccltest"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeNCCL is a world of NCCL groups over pg/nccl's binding test double
// (nccltest): device memory is host memory behind opaque device pointers,
// streams are goroutines, and every NCCL call is carried out by pg/local.
func fakeNCCL(t testing.TB, n int, o nccltest.Options) *nccltest.World {
	t.Helper()
	w, err := nccltest.NewWorld(n, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// deviceCase is one scripted run, done on pg/local with host buckets and
// on the NCCL double with device buckets.
type deviceCase struct {
	n      int
	opts   Options
	hook   func() commhook.Hook
	noSync bool // iteration 1 is a no_sync one
	unused bool // with FindUnusedParameters, param 1 is unused in iteration 2
}

func deviceParams(dt pg.Dtype) []Param {
	ps := []Param{}
	for i, shape := range [][]int{{7, 5}, {1, 5}, {5, 3}, {1, 3}, {33}} {
		ps = append(ps, Param{Name: fmt.Sprintf("p%d", i), Shape: shape, Dtype: dt})
	}
	return ps
}

// runScript runs four iterations (random per-rank ready orders) on every
// rank of gs and returns each rank's gradients after each synchronised
// iteration, as bytes, and each rank's reducer (closed).
func runScript(t *testing.T, gs []pg.ProcessGroup, ps []Param, c deviceCase, seed uint64) ([][][]byte, [][]string) {
	t.Helper()
	out := make([][][]byte, len(gs))
	regs := make([][]string, len(gs))
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		ctx := testCtx(t)
		opts := c.opts
		if c.hook != nil {
			opts.Hook = c.hook()
		}
		red, err := New(ctx, g, ps, opts)
		if err != nil {
			return err
		}
		defer red.Close()
		rng := rand.New(rand.NewPCG(seed, uint64(rank)))
		for iter := range 4 {
			sync := !(c.noSync && iter == 1)
			var unused []int
			if c.unused && iter == 2 {
				unused = []int{1}
			}
			if err := red.Prepare(ctx, Iteration{Sync: sync, Unused: unused}); err != nil {
				return err
			}
			gr := make([]pg.Tensor, len(ps))
			for _, i := range rng.Perm(len(ps)) {
				if slices.Contains(unused, i) {
					continue
				}
				gr[i] = pg.NewTensor(ps[i].Dtype, ps[i].Numel())
				if ps[i].Dtype == pg.Float64 {
					copy(pg.View[float64](gr[i]), uniform[float64](ps[i].Numel(), seed+uint64(iter), uint64(rank*100+i), 3))
				} else {
					copy(pg.View[float32](gr[i]), uniform[float32](ps[i].Numel(), seed+uint64(iter), uint64(rank*100+i), 3))
				}
				if err := red.MarkReady(i, gr[i]); err != nil {
					return err
				}
			}
			if err := red.Finalize(ctx); err != nil {
				return err
			}
			if !sync {
				continue
			}
			for i := range ps {
				if gr[i].Data != nil {
					out[rank] = append(out[rank], slices.Clone(gr[i].Data))
				}
				out[rank] = append(out[rank], slices.Clone(red.Gradient(i).Data))
			}
		}
		regs[rank] = red.DeviceBuckets()
		return nil
	}))
	return out, regs
}

// The reducer's CPU equivalence through the NCCL double: with device
// buckets (uploads on the copy stream, allreduce on the device twin,
// results back once per bucket) every gradient ends bitwise equal to the
// host-bucket run on pg/local, across the rebuild, no_sync, unused
// parameters, static graph, and the allreduce, noop, fp16 and bf16 hooks.
func TestDeviceBucketsEqualHostBuckets(t *testing.T) {
	cases := []deviceCase{
		{n: 1},
		{n: 2, opts: Options{BucketCapBytes: 256, FirstBucketBytes: 64}},
		{n: 3, opts: Options{BucketCapBytes: 200}, noSync: true},
		{n: 3, opts: Options{BucketCapBytes: 128, FindUnusedParameters: true}, unused: true, noSync: true},
		{n: 2, opts: Options{StaticGraph: true, BucketCapBytes: 160}},
		{n: 3, opts: Options{BucketCapBytes: 256}, hook: commhook.FP16Compress},
		{n: 2, opts: Options{BucketCapBytes: 256}, hook: commhook.BF16Compress, noSync: true},
		{n: 2, hook: func() commhook.Hook { return commhook.Compress(pg.Float16, commhook.Allreduce{}) }},
		{n: 2, hook: func() commhook.Hook { return commhook.Noop{} }},
		{n: 4, opts: Options{BucketCapBytes: 96, GradientAsBucketView: true}},
	}
	for k, c := range cases {
		for _, dt := range []pg.Dtype{pg.Float32, pg.Float64} {
			t.Run(fmt.Sprintf("%d/%v", k, dt), func(t *testing.T) {
				ps := deviceParams(dt)
				host, hostRegs := runScript(t, groupsOf(t, "local", c.n), ps, c, uint64(k))
				var dev []pg.ProcessGroup
				for _, g := range fakeNCCL(t, c.n, nccltest.Options{}).Groups {
					dev = append(dev, g)
				}
				got, regs := runScript(t, dev, ps, c, uint64(k))
				for r := range c.n {
					if hostRegs[r] != nil {
						t.Fatalf("rank %d: host buckets report device twins %v", r, hostRegs[r])
					}
					if len(regs[r]) == 0 || slices.ContainsFunc(regs[r], func(s string) bool { return s != "window" }) {
						t.Errorf("rank %d: device buckets %v, want every one a registered window", r, regs[r])
					}
					if len(got[r]) != len(host[r]) {
						t.Fatalf("rank %d: %d results on device, %d on host", r, len(got[r]), len(host[r]))
					}
					for i := range host[r] {
						if !slices.Equal(got[r][i], host[r][i]) {
							t.Fatalf("rank %d: result %d differs between device and host buckets", r, i)
						}
					}
				}
			})
		}
	}
}

// Twins are plain memory for the first plan and registered once, at the
// rebuild; Close releases every registration. Without a window symbol the
// twins fall back to ncclCommRegister.
func TestDeviceBucketsRegisterOnceAtRebuild(t *testing.T) {
	for _, tc := range []struct {
		o    nccltest.Options
		want string
	}{
		{nccltest.Options{}, "window"},
		{nccltest.Options{Version: 22603, NoWindows: true}, "register"},
		{nccltest.Options{Version: 21805, NoWindows: true, NoRegister: true, NoMemAlloc: true}, "none"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			world := fakeNCCL(t, 2, tc.o)
			gs := world.Groups
			ps := deviceParams(pg.Float32)
			noErrors(t, parallel(2, func(rank int) error {
				ctx := testCtx(t)
				red, err := New(ctx, gs[rank], ps, Options{BucketCapBytes: 128, FirstBucketBytes: 64})
				if err != nil {
					return err
				}
				grads := make([]pg.Tensor, len(ps))
				for i, p := range ps {
					grads[i] = pg.Float32s(uniform[float32](p.Numel(), 9, uint64(i), 1))
				}
				for iter := range 3 {
					if err := iterate(ctx, red, grads); err != nil {
						return err
					}
					regs := red.DeviceBuckets()
					live, made := world.Registrations(rank)
					switch {
					case iter == 0 && (slices.ContainsFunc(regs, func(s string) bool { return s != "none" }) || made != 0):
						return fmt.Errorf("iteration 0: twins %v, %d registrations; want plain memory before the rebuild", regs, made)
					case iter > 0 && (slices.ContainsFunc(regs, func(s string) bool { return s != tc.want }) || len(regs) < 2):
						return fmt.Errorf("iteration %d: twins %v, want %q", iter, regs, tc.want)
					case iter > 0 && tc.want != "none" && (live != len(regs) || made != len(regs)):
						return fmt.Errorf("iteration %d: %d live of %d made registrations for %d buckets; want them made once", iter,
							live, made, len(regs))
					}
				}
				if err := red.Close(); err != nil {
					return err
				}
				if live, _ := world.Registrations(rank); live != 0 {
					return fmt.Errorf("%d registrations left after the reducer's Close", live)
				}
				if err := red.Prepare(ctx, Iteration{Sync: true}); err == nil {
					return fmt.Errorf("Prepare after Close succeeded")
				}
				return nil
			}))
		})
	}
}

// Device gradients (pg.DeviceTensor in MarkReady) are reduced on the
// device and the results written back there, equal to host gradients.
func TestDeviceGradients(t *testing.T) {
	const n = 3
	ps := deviceParams(pg.Float32)
	world := fakeNCCL(t, n, nccltest.Options{})
	gs := world.Groups
	hosts := make([][][]float32, n)
	devs := make([][][]float32, n)
	noErrors(t, parallel(n, func(rank int) error {
		ctx := testCtx(t)
		hostRed, err := New(ctx, gs[rank], ps, Options{BucketCapBytes: 128, HostBuckets: true})
		if err != nil {
			return err
		}
		defer hostRed.Close()
		devRed, err := New(ctx, gs[rank], ps, Options{BucketCapBytes: 128})
		if err != nil {
			return err
		}
		defer devRed.Close()
		for iter := range 3 {
			vals := make([][]float32, len(ps))
			hostG := make([]pg.Tensor, len(ps))
			devG := make([]backend.DeviceBucket, len(ps)) // device memory for the gradients
			for i, p := range ps {
				vals[i] = uniform[float32](p.Numel(), uint64(iter), uint64(rank*10+i), 2)
				hostG[i] = pg.Float32s(slices.Clone(vals[i]))
				devG[i], err = gs[rank].NewDeviceBucket(ctx, pg.Float32, p.Numel(), false)
				if err != nil {
					return err
				}
				defer devG[i].Close()
				if err := devG[i].Upload(0, pg.Float32s(vals[i])); err != nil {
					return err
				}
				if err := devG[i].Download(ctx, 0, pg.Float32s(make([]float32, p.Numel()))); err != nil { // wait for the copy
					return err
				}
			}
			if err := iterate(ctx, hostRed, hostG); err != nil {
				return err
			}
			dt := make([]pg.Tensor, len(ps))
			for i := range ps {
				dt[i] = devG[i].Tensor()
			}
			if err := iterate(ctx, devRed, dt); err != nil {
				return err
			}
			if regs := devRed.DeviceBuckets(); len(regs) == 0 {
				return fmt.Errorf("iteration %d: the device reducer has no device buckets", iter)
			}
			hosts[rank], devs[rank] = nil, nil
			for i, p := range ps {
				out := make([]float32, p.Numel())
				if err := devG[i].Download(ctx, 0, pg.Float32s(out)); err != nil {
					return err
				}
				hosts[rank] = append(hosts[rank], pg.View[float32](hostG[i]))
				devs[rank] = append(devs[rank], out)
			}
		}
		return nil
	}))
	for r := range n {
		for i := range ps {
			if !slices.Equal(hosts[r][i], devs[r][i]) {
				t.Errorf("rank %d param %d: device gradient result %v, host %v", r, i, devs[r][i][:3], hosts[r][i][:3])
			}
		}
	}
}

// PowerSGD refuses device buckets, saying what to do; no_sync with device
// gradients and device gradients on a host-only group are refused.
func TestDeviceBucketRefusals(t *testing.T) {
	ps := deviceParams(pg.Float32)
	world := fakeNCCL(t, 1, nccltest.Options{})
	gs := world.Groups
	ctx := testCtx(t)
	psgd := func() commhook.Hook {
		h, err := commhook.NewPowerSGD(commhook.PowerSGDOptions{MatrixApproximationRank: 1})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	red, err := New(ctx, gs[0], ps, Options{Hook: psgd()})
	if err != nil {
		t.Fatal(err)
	}
	err = red.Prepare(ctx, Iteration{Sync: true})
	if err == nil || !strings.Contains(err.Error(), "HostBuckets") || !strings.Contains(err.Error(), "device buckets") {
		t.Errorf("PowerSGD on device buckets: %v, want a refusal naming HostBuckets", err)
	}
	red.Close()
	red, err = New(ctx, gs[0], ps, Options{Hook: psgd(), HostBuckets: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := red.Prepare(ctx, Iteration{Sync: true}); err != nil {
		t.Errorf("PowerSGD with HostBuckets: %v", err)
	}
	red.Close()

	db, err := gs[0].NewDeviceBucket(ctx, pg.Float32, ps[4].Numel(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	red, err = New(ctx, gs[0], ps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer red.Close()
	if err := red.Prepare(ctx, Iteration{Sync: false}); err != nil {
		t.Fatal(err)
	}
	if err := red.MarkReady(4, db.Tensor()); err == nil || !strings.Contains(err.Error(), "no_sync") {
		t.Errorf("device gradient in a no_sync iteration: %v", err)
	}
	lg := groupsOf(t, "local", 1)
	hred, err := New(ctx, lg[0], ps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := hred.Prepare(ctx, Iteration{Sync: true}); err != nil {
		t.Fatal(err)
	}
	if err := hred.MarkReady(4, db.Tensor()); err == nil || !strings.Contains(err.Error(), "no device buckets") {
		t.Errorf("device gradient on pg/local: %v", err)
	}
}

// Uploads and the allreduce of a complete bucket run while "backward" is
// still producing the other buckets' gradients: on the NCCL double, after
// the gradients of the first bucket in launch order are marked, its
// copies and its allreduce run before any other gradient is marked.
func TestDeviceUploadsOverlapBackward(t *testing.T) {
	const n = 2
	ps := deviceParams(pg.Float32)
	world := fakeNCCL(t, n, nccltest.Options{})
	gs := world.Groups
	count := func(tr []string, what string) int {
		c := 0
		for _, s := range tr {
			if s == what {
				c++
			}
		}
		return c
	}
	noErrors(t, parallel(n, func(rank int) error {
		ctx := testCtx(t)
		red, err := New(ctx, gs[rank], ps, Options{BucketCapBytes: 128, FirstBucketBytes: 64})
		if err != nil {
			return err
		}
		defer red.Close()
		grads := make([]pg.Tensor, len(ps))
		for i, p := range ps {
			grads[i] = pg.Float32s(uniform[float32](p.Numel(), 5, uint64(i), 1))
		}
		for range 2 { // through the rebuild
			if err := iterate(ctx, red, grads); err != nil {
				return err
			}
		}
		plan := red.Buckets()
		if len(plan) < 2 {
			return fmt.Errorf("plan %v: want several buckets", plan)
		}
		if err := red.Prepare(ctx, Iteration{Sync: true}); err != nil {
			return err
		}
		before := world.Trace(rank)
		for _, i := range plan[0] {
			if err := red.MarkReady(i, grads[i]); err != nil {
				return err
			}
		}
		// "Backward" pauses here; the first bucket's pipeline runs on.
		for {
			tr := world.Trace(rank)
			if count(tr, "allReduce") > count(before, "allReduce") && count(tr, "d2h") > count(before, "d2h") {
				if got, want := count(tr, "h2d")-count(before, "h2d"), len(plan[0]); got != want {
					return fmt.Errorf("%d uploads ran for the first bucket's %d gradients", got, want)
				}
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("the first bucket was not uploaded, reduced and downloaded while backward paused: trace since %v",
					tr[len(before):])
			}
			time.Sleep(time.Millisecond)
		}
		for _, idx := range plan[1:] {
			for _, i := range idx {
				if err := red.MarkReady(i, grads[i]); err != nil {
					return err
				}
			}
		}
		return red.Finalize(ctx)
	}))
}

// Device buckets are found behind wrappers (pg/instrument here), and the
// collectives still go through the wrapper.
func TestDeviceBucketsThroughWrappers(t *testing.T) {
	world := fakeNCCL(t, 1, nccltest.Options{})
	gs := world.Groups
	reg := prometheus.NewRegistry()
	w, err := instrument.Wrap(gs[0], reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	ps := deviceParams(pg.Float32)
	red, err := New(ctx, w, ps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer red.Close()
	if err := iterate(ctx, red, randomGrads(ps)); err != nil {
		t.Fatal(err)
	}
	if regs := red.DeviceBuckets(); len(regs) == 0 {
		t.Error("the reducer did not find the NCCL group's device buckets behind pg/instrument")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "ddp_collective_bytes_total" || strings.HasPrefix(mf.GetName(), "ddp_collective_seconds") {
			found = true
		}
	}
	if !found {
		t.Error("no collective went through the instrument wrapper")
	}
}
