package reducer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// With FindUnusedParameters, a parameter unused on one rank is averaged
// with zeros from that rank; one unused on every rank is never written.
func TestFindUnusedParameters(t *testing.T) {
	ps := mlpParams(4, 3, 2) // 4 params
	gs := world(t, 2)
	errs := onRanks(gs, func(rank int, g pg.ProcessGroup) error {
		ctx := testCtx(t)
		red, err := New(ctx, g, ps, Options{FindUnusedParameters: true, BucketCapBytes: 64, FirstBucketBytes: 16})
		if err != nil {
			return err
		}
		for iter := range 3 {
			gr := grads(ps, rank, iter)
			unused := []int{3}
			if rank == 1 {
				unused = []int{2, 3}
			}
			if err := red.Prepare(ctx, Iteration{Sync: true, Unused: unused}); err != nil {
				return err
			}
			sentinel := slices.Clone(gr[3])
			for i := range 3 - rank {
				if err := red.MarkReady(i, pg.Float64s(gr[i])); err != nil {
					return err
				}
			}
			if err := red.Finalize(ctx); err != nil {
				return err
			}
			// param 2: rank 0's gradient plus rank 1's zeros, halved.
			want := slices.Clone(grads(ps, 0, iter)[2])
			for j := range want {
				want[j] /= 2
			}
			if got := pg.View[float64](red.Gradient(2)); !slices.Equal(got, want) {
				t.Errorf("rank %d iter %d: param 2 = %v, want %v", rank, iter, got, want)
			}
			if rank == 0 && !slices.Equal(gr[2], want) {
				t.Errorf("rank 0 iter %d: param 2's gradient was not written back", iter)
			}
			if !slices.Equal(gr[3], sentinel) {
				t.Errorf("rank %d: a parameter unused everywhere was written", rank)
			}
		}
		return nil
	})
	noErrors(t, errs)
}

func TestUnusedThatGetsAGradientIsMarkedTwice(t *testing.T) {
	ps := mlpParams(4, 3)
	gs := world(t, 1)
	ctx := testCtx(t)
	red, err := New(ctx, gs[0], ps, Options{FindUnusedParameters: true})
	if err != nil {
		t.Fatal(err)
	}
	gr := grads(ps, 0, 0)
	red.Prepare(ctx, Iteration{Sync: true, Unused: []int{0}})
	red.MarkReady(1, pg.Float64s(gr[1])) // the first hook marks param 0 as unused
	if err := red.MarkReady(0, pg.Float64s(gr[0])); !errors.Is(err, ErrMarkedTwice) ||
		!strings.Contains(err.Error(), "unused parameter detection") {
		t.Fatalf("got %v", err)
	}
}

// No-sync iterations accumulate locally; the synchronised one reduces the
// sum. Two windows, so the second one spans the bucket rebuild.
func TestNoSyncAccumulatesAcrossTheRebuild(t *testing.T) {
	ps := mlpParams(5, 4, 3)
	gs := world(t, 2)
	var launches atomic.Int64
	counting := commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
		launches.Add(1)
		return commhook.Allreduce{}.Run(ctx, g, b)
	})
	const k = 3
	errs := onRanks(gs, func(rank int, g pg.ProcessGroup) error {
		ctx := testCtx(t)
		red, err := New(ctx, g, ps, Options{Hook: counting, BucketCapBytes: 100, FirstBucketBytes: 40})
		if err != nil {
			return err
		}
		for window := range 2 {
			var last [][]float64
			for micro := range k {
				it := window*k + micro
				gr := grads(ps, rank, it)
				sync := micro == k-1
				if err := red.Prepare(ctx, Iteration{Sync: sync}); err != nil {
					return err
				}
				for i := len(ps) - 1; i >= 0; i-- {
					if err := red.MarkReady(i, pg.Float64s(gr[i])); err != nil {
						return err
					}
				}
				if err := red.Finalize(ctx); err != nil {
					return err
				}
				last = gr
			}
			for i := range ps {
				want := make([]float64, ps[i].Numel())
				for micro := range k {
					for j, v := range average(ps, 2, window*k+micro)[i] {
						want[j] += v
					}
				}
				if !closeTo(last[i], want, 1e-12) {
					t.Errorf("rank %d window %d param %d: got %v want %v", rank, window, i, last[i], want)
				}
			}
		}
		return nil
	})
	noErrors(t, errs)
	// Window 1 has one bucket per rank; window 2 is rebuilt into several.
	if n := launches.Load(); n < 2*(1+2) {
		t.Fatalf("%d bucket launches; no-sync iterations must not communicate, synced ones must", n)
	}
}

// StaticGraph: the first iteration communicates only at Finalize and finds
// the unused set; later iterations reuse it with overlap; a parameter
// unused at first that later gets a gradient is an error.
func TestStaticGraph(t *testing.T) {
	ps := mlpParams(4, 3, 2)
	gs := world(t, 2)
	errs := onRanks(gs, func(rank int, g pg.ProcessGroup) error {
		ctx := testCtx(t)
		var launchedEarly atomic.Bool
		var inBackward atomic.Bool
		hook := commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
			if inBackward.Load() {
				launchedEarly.Store(true)
			}
			return commhook.Allreduce{}.Run(ctx, g, b)
		})
		red, err := New(ctx, g, ps, Options{StaticGraph: true, Hook: hook, BucketCapBytes: 64, FirstBucketBytes: 16})
		if err != nil {
			return err
		}
		for iter := range 4 {
			gr := grads(ps, rank, iter)
			if err := red.Prepare(ctx, Iteration{Sync: true}); err != nil {
				return err
			}
			inBackward.Store(true)
			for i := 2; i >= 0; i-- { // parameter 3 never gets a gradient
				if err := red.MarkReady(i, pg.Float64s(gr[i])); err != nil {
					return err
				}
			}
			inBackward.Store(false)
			if iter == 0 && launchedEarly.Load() {
				t.Errorf("rank %d: the first static iteration launched during backward", rank)
			}
			if iter == 2 && !launchedEarly.Load() {
				t.Errorf("rank %d: later static iterations never overlapped backward", rank)
			}
			if err := red.Finalize(ctx); err != nil {
				return err
			}
			want := average(ps, 2, iter)
			for i := range 3 {
				if !closeTo(gr[i], want[i], 1e-12) {
					t.Errorf("rank %d iter %d param %d: got %v want %v", rank, iter, i, gr[i], want[i])
				}
			}
		}
		if len(red.Buckets()) < 2 {
			t.Errorf("rank %d: buckets were not rebuilt: %v", rank, red.Buckets())
		}
		gr := grads(ps, rank, 9)
		red.Prepare(ctx, Iteration{Sync: true})
		err = red.MarkReady(3, pg.Float64s(gr[3]))
		if !errors.Is(err, ErrGraphChanged) {
			t.Errorf("rank %d: a parameter unused in the first iteration got a gradient: %v", rank, err)
		}
		return nil
	})
	noErrors(t, errs)
}
