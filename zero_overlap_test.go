package ddp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/reducer"
)

// zeroCase is one run of TestZeroOverlapBitwise.
type zeroCase struct {
	backend  string
	ranks    int
	opt      string
	deferred bool
	accum    int
	clip     float64
	hook     string // "", "fp16", "powersgd"
	reduce   bool   // ZeroHookOptions.ReduceToOwners
}

func (c zeroCase) String() string {
	return fmt.Sprintf("%s/%d/%s/deferred=%v/accum=%d/clip=%v/hook=%q/reduce=%v", c.backend, c.ranks, c.opt,
		c.deferred, c.accum, c.clip, c.hook, c.reduce)
}

// zeroRun is what one rank ends with.
type zeroRun struct {
	values [][]float64
	state  optim.State
}

// A ZeroHook steps each bucket's parameters as its reduction completes and
// broadcasts them over a group of their own: the parameters and the
// consolidated optimizer state end bitwise where the unsharded optimizer
// after plain DDP leaves them, on every rank, on pg/local and tcp, in
// both of torch's orders, with accumulation, clipping and a comm hook.
func TestZeroOverlapBitwise(t *testing.T) {
	cases := []zeroCase{
		{backend: "local", ranks: 2, opt: "adam", accum: 1},
		{backend: "local", ranks: 3, opt: "adamw", accum: 1, deferred: true},
		{backend: "tcp", ranks: 3, opt: "momentum", accum: 2, clip: 0.05},
		{backend: "tcp", ranks: 2, opt: "adamw", accum: 1, hook: "fp16"},
		{backend: "tcp", ranks: 3, opt: "adam", accum: 1, hook: "powersgd"},
		{backend: "local", ranks: 4, opt: "sgd", accum: 3, deferred: true},
	}
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			want := zeroRanks(t, c, false)
			got := zeroRanks(t, c, true)
			for r := range got {
				if p, e := firstBitDiff(got[r].values, want[0].values); p >= 0 {
					t.Fatalf("rank %d: parameter %d element %d is %v with the overlap, %v without", r, p, e,
						got[r].values[p][e], want[0].values[p][e])
				}
			}
			if fmt.Sprint(got[0].state) != fmt.Sprint(want[0].state) {
				t.Fatalf("the consolidated state differs from the unsharded optimizer's:\n%v\n%v", got[0].state,
					want[0].state)
			}
		})
	}
}

// zeroRanks trains c on every rank: with the overlap hook, or plain DDP
// and the unsharded optimizer.
func zeroRanks(t *testing.T, c zeroCase, overlap bool) []zeroRun {
	spec := mlpSpec{sizes: []int{8, 16, 16, 4}, rows: 4}
	ctx := testCtx(t)
	gs := groupsOf(t, c.backend, c.ranks)
	out := make([]zeroRun, c.ranks)
	var building sync.Mutex
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		m := newMLP[float64](t, spec, referenceSeed)
		run, err := zeroTrain(ctx, t, &building, m, g, c, overlap)
		out[r] = run
		return err
	}))
	return out
}

// zeroSetup makes the optimizer and the reducer's hook.
func zeroSetup(ctx context.Context, g pg.ProcessGroup, c zeroCase, sizes []int, overlap bool) (optim.Optimizer,
	*optim.ZeroHook, commhook.Hook, func(), error) {
	var inner commhook.Hook = commhook.Allreduce{}
	switch c.hook {
	case "fp16":
		inner = commhook.FP16Compress()
	case "powersgd": // compressing from the third iteration, its later collectives issued from goroutines
		o := commhook.DefaultPowerSGDOptions()
		o.StartIter = 2
		ps, err := commhook.NewPowerSGD(o)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		inner = ps
	}
	o := optim.Options{LR: optim.Set(0.05), WeightDecay: optim.Set(0.01)}
	if !overlap {
		opt, err := optim.NewWith(c.opt, o, len(sizes))
		return opt, nil, inner, func() {}, err
	}
	z, err := optim.NewZero(g, c.opt, o, sizes, optim.ZeroOptions{})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var sp pg.Splitter
	if !pg.As(g, &sp) {
		return nil, nil, nil, nil, errors.New("the group cannot make subgroups")
	}
	bcast, err := sp.NewGroup(ctx, slices.Collect(func(yield func(int) bool) {
		for r := range g.Size() {
			if !yield(r) {
				return
			}
		}
	}))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if c.reduce {
		inner = nil
	}
	zh, err := z.Hook(inner, bcast, optim.ZeroHookOptions{Deferred: c.deferred, ClipValue: c.clip,
		ReduceToOwners: c.reduce})
	return z, zh, zh, func() { bcast.Close() }, err
}

// zeroTrain runs 6 optimizer steps of c on one rank.
func zeroTrain(ctx context.Context, t *testing.T, building *sync.Mutex, m *mlp[float64], g pg.ProcessGroup, c zeroCase,
	overlap bool) (zeroRun, error) {
	sizes := make([]int, len(m.params))
	for i, p := range m.params {
		sizes[i] = p.Shape().TotalSize()
	}
	opt, zh, hook, done, err := zeroSetup(ctx, g, c, sizes, overlap)
	if err != nil {
		return zeroRun{}, err
	}
	defer done()
	if err := m.wrap(ctx, g, Options{Hook: hook, BucketCapBytes: 600}); err != nil { // several buckets
		return zeroRun{}, err
	}
	defer m.ddp.Close()
	building.Lock()
	err = m.build(t)
	building.Unlock()
	if err != nil {
		return zeroRun{}, err
	}
	for step := range 6 {
		if err := zeroStep(ctx, m, g, c, opt, zh, step); err != nil {
			return zeroRun{}, fmt.Errorf("step %d: %w", step, err)
		}
	}
	run := zeroRun{values: m.values(), state: opt.State()}
	if z, ok := opt.(*optim.Zero); ok {
		run.state, err = z.Consolidate(ctx)
	}
	return run, err
}

// zeroStep is one optimizer step of c.accum micro-batches.
func zeroStep(ctx context.Context, m *mlp[float64], g pg.ProcessGroup, c zeroCase, opt optim.Optimizer,
	zh *optim.ZeroHook, step int) error {
	if err := opt.SetLR(0.05 / float64(1+step)); err != nil {
		return err
	}
	for micro := range c.accum {
		b := makeBatch[float64](m.spec, m.spec.rows, uint64(100*step+10*micro+g.Rank()))
		if err := m.feed(b); err != nil {
			return err
		}
		if micro < c.accum-1 {
			if err := m.ddp.RunAllNoSync(ctx, m.vm); err != nil {
				return err
			}
			m.vm.Reset()
			continue
		}
		if zh != nil {
			params, err := m.ddp.ParamTensors()
			if err != nil {
				return err
			}
			if err := zh.Begin(params, c.accum); err != nil {
				return err
			}
		}
		if err := m.ddp.RunAll(ctx, m.vm); err != nil {
			return err
		}
	}
	defer m.vm.Reset()
	if zh != nil {
		return zh.Finish()
	}
	params, grads, err := m.ddp.StepTensors()
	if err != nil {
		return err
	}
	for _, gr := range grads {
		if err := commhook.Divide(gr, c.accum); err != nil {
			return err
		}
	}
	if c.clip > 0 {
		if err := optim.ClipGradValue(grads, c.clip); err != nil {
			return err
		}
	}
	return opt.Step(params, grads)
}

// With ReduceToOwners (ZeRO-2's communication) each gradient is reduced to
// its owner alone: the backend's reduce adds in another order than its
// allreduce, so the parameters agree with the unsharded run to rounding
// (1e-12 relative, in float64), and every rank holds the same bits.
func TestZeroReduceToOwners(t *testing.T) {
	for _, c := range []zeroCase{
		{backend: "tcp", ranks: 3, opt: "adamw", accum: 1, reduce: true},
		{backend: "local", ranks: 2, opt: "momentum", accum: 2, deferred: true, reduce: true},
	} {
		t.Run(c.String(), func(t *testing.T) {
			want := zeroRanks(t, zeroCase{backend: c.backend, ranks: c.ranks, opt: c.opt, accum: c.accum}, false)
			got := zeroRanks(t, c, true)
			if e := relErr(got[0].values, want[0].values); e > 1e-12 {
				t.Fatalf("relative error %g against the unsharded run, want <= 1e-12", e)
			}
			for r := range got {
				if p, e := firstBitDiff(got[r].values, got[0].values); p >= 0 {
					t.Fatalf("rank %d differs from rank 0 at parameter %d element %d", r, p, e)
				}
			}
		})
	}
}

// The hook refuses what it cannot do, saying what to change.
func TestZeroHookRefuses(t *testing.T) {
	ctx := testCtx(t)
	gs := groupsOf(t, "local", 2)
	sizes := []int{3, 5}
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		z, err := optim.NewZero(g, "adam", optim.Options{LR: optim.Set(0.1)}, sizes, optim.ZeroOptions{})
		if err != nil {
			return err
		}
		for _, want := range []struct {
			bcast pg.ProcessGroup
			o     optim.ZeroHookOptions
			msg   string
		}{
			{nil, optim.ZeroHookOptions{}, "no broadcast group"},
			{gs[1-r], optim.ZeroHookOptions{}, "same ranks in the same order"},
			{g, optim.ZeroHookOptions{ClipValue: -1}, "ClipValue"},
		} {
			if _, err := z.Hook(nil, want.bcast, want.o); err == nil || !strings.Contains(err.Error(), want.msg) {
				return fmt.Errorf("Hook(%v): %v, want an error saying %q", want.o, err, want.msg)
			}
		}
		if _, err := z.Hook(commhook.FP16Compress(), g, optim.ZeroHookOptions{ReduceToOwners: true}); err == nil ||
			!strings.Contains(err.Error(), "pass no inner hook") {
			return fmt.Errorf("ReduceToOwners with fp16: %v", err)
		}
		zh, err := z.Hook(nil, g, optim.ZeroHookOptions{})
		if err != nil {
			return err
		}
		b := &commhook.GradBucket{Buffer: pg.Float64s(make([]float64, 8)), Params: []commhook.ParamView{{Len: 8}}}
		if err := zh.Run(ctx, g, b).Wait(ctx); err == nil || !strings.Contains(err.Error(), "without Begin") {
			return fmt.Errorf("Run before Begin: %v", err)
		}
		if err := zh.Finish(); err == nil {
			return errors.New("Finish without Begin: no error")
		}
		params := []pg.Tensor{pg.Float32s(make([]float32, 3)), pg.Float32s(make([]float32, 5))}
		if err := zh.Begin(params[:1], 1); err == nil {
			return errors.New("Begin with one parameter of two: no error")
		}
		if err := zh.Begin(params, 1); err != nil {
			return err
		}
		b.Params = []commhook.ParamView{{Index: 0, Len: 3}, {Index: 1, Offset: 3, Len: 5}}
		if err := zh.Run(ctx, g, b).Wait(ctx); err == nil || !strings.Contains(err.Error(), "MixedPrecision") {
			return fmt.Errorf("a float64 bucket of float32 parameters: %v", err)
		}
		dev := &commhook.GradBucket{Buffer: pg.Tensor{Dtype: pg.Float32, Device: &pg.DeviceMemory{Bytes: 32}},
			Params: b.Params}
		if err := zh.Run(ctx, g, dev).Wait(ctx); err == nil || !strings.Contains(err.Error(), "device memory") {
			return fmt.Errorf("a device bucket: %v", err)
		}
		zh.Abandon()
		return nil
	}))
}

// A non-finite averaged gradient fails the bucket on every rank with
// reducer.ErrNonFinite, and no rank waits for a broadcast.
func TestZeroHookNonFinite(t *testing.T) {
	ctx := testCtx(t)
	gs := groupsOf(t, "local", 3)
	noErrors(t, onGroups(gs, func(r int, g pg.ProcessGroup) error {
		z, err := optim.NewZero(g, "sgd", optim.Options{LR: optim.Set(0.1)}, []int{2, 2}, optim.ZeroOptions{})
		if err != nil {
			return err
		}
		zh, err := z.Hook(nil, g, optim.ZeroHookOptions{})
		if err != nil {
			return err
		}
		params := []pg.Tensor{pg.Float64s(make([]float64, 2)), pg.Float64s(make([]float64, 2))}
		if err := zh.Begin(params, 1); err != nil {
			return err
		}
		grad := []float64{1, 2, 3, 4}
		if r == 1 {
			grad[3] = inf()
		}
		b := &commhook.GradBucket{Buffer: pg.Float64s(grad), IsLast: true,
			Params: []commhook.ParamView{{Index: 0, Len: 2, Name: "a"}, {Index: 1, Offset: 2, Len: 2, Name: "b"}}}
		err = zh.Run(ctx, g, b).Wait(ctx)
		zh.Abandon()
		if !errors.Is(err, reducer.ErrNonFinite) || !strings.Contains(err.Error(), "parameter 1 (b)") {
			return fmt.Errorf("rank %d: %v, want ErrNonFinite naming parameter 1 (b)", r, err)
		}
		return nil
	}))
}

func inf() float64 { var zero float64; return 1 / zero }

// In torch's deferred order a bucket waits for the iteration's last one;
// when the iteration fails before it comes, Abandon ends the wait at once
// instead of at the iteration's timeout.
func TestZeroHookAbandonEndsWaits(t *testing.T) {
	ctx := testCtx(t)
	g := groupsOf(t, "local", 1)[0]
	z, err := optim.NewZero(g, "sgd", optim.Options{LR: optim.Set(0.1)}, []int{2}, optim.ZeroOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zh, err := z.Hook(nil, g, optim.ZeroHookOptions{Deferred: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := zh.Begin([]pg.Tensor{pg.Float64s(make([]float64, 2))}, 1); err != nil {
		t.Fatal(err)
	}
	b := &commhook.GradBucket{Buffer: pg.Float64s([]float64{1, 2}), Params: []commhook.ParamView{{Index: 0, Len: 2}}}
	w := zh.Run(ctx, g, b) // not the last: it waits
	zh.Abandon()
	done := make(chan error, 1)
	go func() { done <- w.Wait(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the abandoned bucket's Work succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the abandoned bucket still waits for the last bucket after 5 s")
	}
}
