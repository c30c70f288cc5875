package reducer

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/nccltest"
)

func powerSGDHook(t testing.TB) func() commhook.Hook {
	return func() commhook.Hook {
		h, err := commhook.NewPowerSGD(commhook.PowerSGDOptions{MatrixApproximationRank: 1, StartIter: 2,
			UseErrorFeedback: true, WarmStart: true})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
}

// A rank whose gradient overflows to an infinity at a known iteration:
// every rank returns the same NonFiniteOriginError naming that rank, the
// iteration and the parameter, with every hook and backend, and the
// value never reaches the others' results. The iterations around it are
// clean: nothing of the finding lingers.
func TestNonFiniteOriginNamesTheRank(t *testing.T) {
	hooks := []struct {
		name string
		hook func() commhook.Hook
		opts Options
	}{
		{"allreduce", func() commhook.Hook { return commhook.Allreduce{} }, Options{}},
		{"fp16", commhook.FP16Compress, Options{}},
		{"powersgd", powerSGDHook(t), Options{}},
		{"allreduce+unused", func() commhook.Hook { return commhook.Allreduce{} }, Options{FindUnusedParameters: true}},
	}
	for _, backend := range []string{"local", "tcp"} {
		for _, h := range hooks {
			t.Run(backend+"/"+h.name, func(t *testing.T) {
				nonFiniteOrigin(t, groupsOf(t, backend, 3), h.hook, h.opts, []int{1})
			})
		}
	}
}

// Two ranks at once: both are named.
func TestNonFiniteOriginNamesEveryRank(t *testing.T) {
	nonFiniteOrigin(t, groupsOf(t, "local", 3), func() commhook.Hook { return commhook.Allreduce{} }, Options{},
		[]int{0, 2})
}

// Device buckets (the NCCL double): a host gradient's bad slot was
// uploaded already; it is zeroed and uploaded again before the allreduce.
func TestNonFiniteOriginOnDeviceBuckets(t *testing.T) {
	for name, hook := range map[string]func() commhook.Hook{
		"allreduce": func() commhook.Hook { return commhook.Allreduce{} },
		"fp16":      commhook.FP16Compress,
	} {
		t.Run(name, func(t *testing.T) {
			var gs []pg.ProcessGroup
			for _, g := range fakeNCCL(t, 3, nccltest.Options{}).Groups {
				gs = append(gs, g)
			}
			nonFiniteOrigin(t, gs, hook, Options{}, []int{1})
		})
	}
}

func nonFiniteOrigin(t *testing.T, gs []pg.ProcessGroup, hook func() commhook.Hook, opts Options, bad []int) {
	const badIter, iters = 4, 5
	ctx := testCtx(t)
	params := benchParams(16, 16, 4)
	opts.BucketCapBytes, opts.FindNonFiniteOrigin, opts.CheckFinite = 256, true, true
	errs := onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		o := opts
		o.Hook = hook()
		r, err := New(ctx, g, params, o)
		if err != nil {
			return err
		}
		defer r.Close()
		for it := 1; it <= iters; it++ {
			grads := randomGrads(params)
			if it == badIter && slices.Contains(bad, rank) {
				pg.View[float32](grads[2])[5] = float32(math.Inf(1))
			}
			err := iterate(ctx, r, grads)
			if it != badIter {
				if err != nil {
					return fmt.Errorf("rank %d, iteration %d: %w", rank, it, err)
				}
				continue
			}
			var oe *NonFiniteOriginError
			if !errors.As(err, &oe) || !errors.Is(err, ErrNonFinite) {
				return fmt.Errorf("rank %d, iteration %d: %v, want a NonFiniteOriginError", rank, it, err)
			}
			if !slices.Equal(oe.Ranks, bad) || oe.Iteration != badIter || !slices.Equal(oe.Names, []string{"fc2.weight"}) ||
				oe.Bucket < 0 {
				return fmt.Errorf("rank %d: %+v (%v), want ranks %v, iteration %d, fc2.weight", rank, *oe, err, bad, badIter)
			}
			for i, g := range grads {
				if !Finite(g) {
					return fmt.Errorf("rank %d: the result of parameter %d is not finite: the value spread", rank, i)
				}
			}
		}
		return nil
	})
	noErrors(t, errs)
}

// Under a Join, a joined rank shadows with zeros and takes part in the
// agreement: rank 0's NaN while rank 1 has joined is found on rank 0,
// every training rank skips that step, and nobody waits.
func TestNonFiniteOriginWhileJoined(t *testing.T) {
	grad := func(r, t, i int, w []float64) []float64 {
		g := joinGrad(r, t, i, w)
		if r == 0 && t == 1 && i == 0 {
			g[1] = math.NaN()
		}
		return g
	}
	batches := []int{3, 0, 2}
	gs := groupsOf(t, "local", len(batches))
	got := make([][][]float64, len(gs))
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) (err error) {
		got[rank], err = trainJoinedWith(testCtx(t), g, batches, Options{FindNonFiniteOrigin: true}, JoinOptions{}, grad)
		return err
	}))
	checkJoined(t, got, joinReferenceWith(batches, false, grad))
}

// Device gradients (pg.DeviceTensor, the NCCL double): rank 1's infinity
// is found where its slot comes down for the division, and goes up as
// zeros; every rank names rank 1, and no result holds the infinity.
func TestNonFiniteOriginInDeviceGradients(t *testing.T) {
	const n, badRank = 3, 1
	ps := deviceParams(pg.Float32)
	gs := fakeNCCL(t, n, nccltest.Options{}).Groups
	noErrors(t, parallel(n, func(rank int) error {
		ctx := testCtx(t)
		red, err := New(ctx, gs[rank], ps, Options{BucketCapBytes: 128, FindNonFiniteOrigin: true})
		if err != nil {
			return err
		}
		defer red.Close()
		for iter := 1; iter <= 3; iter++ {
			dt := make([]pg.Tensor, len(ps))
			for i, p := range ps {
				vals := uniform[float32](p.Numel(), uint64(iter), uint64(rank*10+i), 2)
				if iter == 3 && rank == badRank && i == 1 {
					vals[0] = float32(math.Inf(-1))
				}
				db, err := gs[rank].NewDeviceBucket(ctx, pg.Float32, p.Numel(), false)
				if err != nil {
					return err
				}
				defer db.Close()
				if err := db.Upload(0, pg.Float32s(vals)); err != nil {
					return err
				}
				if err := db.Download(ctx, 0, pg.Float32s(make([]float32, p.Numel()))); err != nil { // wait for the copy
					return err
				}
				dt[i] = db.Tensor()
			}
			err := iterate(ctx, red, dt)
			var oe *NonFiniteOriginError
			switch {
			case iter < 3 && err != nil:
				return fmt.Errorf("iteration %d: %w", iter, err)
			case iter == 3 &&
				(!errors.As(err, &oe) || !slices.Equal(oe.Ranks, []int{badRank}) || oe.Iteration != 3 ||
					!slices.Equal(oe.Params, []int{1})):
				return fmt.Errorf("rank %d: %v; want a NonFiniteOriginError naming rank %d, iteration 3, parameter 1", rank, err,
					badRank)
			}
			if len(red.DeviceBuckets()) == 0 {
				return fmt.Errorf("iteration %d: no device buckets", iter)
			}
		}
		for i := range ps {
			if !Finite(red.Gradient(i)) {
				return fmt.Errorf("rank %d: the result of parameter %d is not finite: the value spread", rank, i)
			}
		}
		return nil
	}))
}
