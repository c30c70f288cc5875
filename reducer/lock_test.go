package reducer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// While rank 0's Finalize waits for a peer that has not started its
// backward (a stalled peer), every read-only method of rank 0's reducer
// answers within milliseconds, and an overlapping Prepare is refused
// rather than interleaved (Note [no lock across a wait]). Once rank 1
// runs its iteration, both finish with the average.
func TestReadOnlyMethodsAnswerWhileFinalizeWaits(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 2)
	gs := groupsOf(t, "tcp", 2)
	rs := make([]*Reducer, 2)
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		var err error
		rs[rank], err = New(ctx, g, params, Options{FindUnusedParameters: true})
		return err
	}))
	grads := [][]pg.Tensor{sameValues(params), sameValues(params)}
	done := make(chan error, 1)
	go func() {
		r := rs[0]
		if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
			done <- err
			return
		}
		for i := len(params) - 1; i >= 0; i-- {
			if err := r.MarkReady(i, grads[0][i]); err != nil {
				done <- err
				return
			}
		}
		done <- r.Finalize(ctx)
	}()
	time.Sleep(100 * time.Millisecond) // rank 0 is now waiting in Finalize
	r := rs[0]
	calls := map[string]func(){
		"Buckets":        func() { r.Buckets() },
		"Gradient":       func() { r.Gradient(0) },
		"GradientBuffer": func() { r.GradientBuffer(1) },
		"CopyStats":      func() { r.CopyStats() },
		"GloballyUnused": func() { r.GloballyUnused() },
		"DeviceBuckets":  func() { r.DeviceBuckets() },
		"ReadyOrder":     func() { r.ReadyOrder() },
		"Accumulating":   func() { r.Accumulating() },
		"LoggingData":    func() { r.LoggingData() },
		"Options":        func() { r.Options() },
		"Params":         func() { r.Params() },
	}
	blocked := 0
	for name, call := range calls {
		returned := make(chan struct{})
		go func() { call(); close(returned) }()
		select {
		case <-returned:
		case <-time.After(time.Second):
			t.Errorf("%s is still blocked after 1s while Finalize waits", name)
			blocked++
		}
	}
	if blocked == 0 {
		if err := r.Prepare(ctx, Iteration{Sync: true}); err == nil {
			t.Error("a Prepare overlapping Finalize was accepted")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Finalize returned before the peer ran: %v", err)
	default:
	}
	if err := iterate(ctx, rs[1], grads[1]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := pg.View[float64](sameValues(params)[0])
	if got := pg.View[float64](grads[0][0]); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rank 0's result %v, want the average %v", got, want)
	}
	// The refused Prepare left the reducers in step: one more iteration.
	noErrors(t,
		onGroups(gs, func(rank int, _ pg.ProcessGroup) error { return iterate(ctx, rs[rank], sameValues(params)) }))
}

// readOnlyCalls are the Reducer's read-only methods, each of which must
// answer at once whatever an iteration is doing.
func readOnlyCalls(r *Reducer) map[string]func() {
	return map[string]func(){
		"Buckets":        func() { r.Buckets() },
		"Gradient":       func() { r.Gradient(0) },
		"GradientBuffer": func() { r.GradientBuffer(1) },
		"CopyStats":      func() { r.CopyStats() },
		"GloballyUnused": func() { r.GloballyUnused() },
		"DeviceBuckets":  func() { r.DeviceBuckets() },
		"ReadyOrder":     func() { r.ReadyOrder() },
		"Accumulating":   func() { r.Accumulating() },
		"LoggingData":    func() { r.LoggingData() },
		"Progress":       func() { r.Progress() },
	}
}

// A comm hook runs without the reducer's lock (Note [events in, actions
// out]): a hook that reads the reducer from inside Run answers rather than
// deadlocking, as it did while launches held the lock.
func TestHookMayCallTheReducer(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 2)
	gs := world(t, 1)
	var r *Reducer
	calls := 0
	hook := commhook.HookFunc(func(ctx context.Context, g pg.ProcessGroup, b *commhook.GradBucket) pg.Work {
		done := make(chan struct{})
		go func() {
			for _, call := range readOnlyCalls(r) {
				call()
				calls++
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			return pg.Completed(fmt.Errorf("bucket %d: the reducer's read-only methods blocked while the hook ran", b.Index))
		}
		return commhook.Allreduce{}.Run(ctx, g, b)
	})
	var err error
	r, err = New(ctx, gs[0], params, Options{Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	if err := iterate(ctx, r, sameValues(params)); err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal("the hook never ran")
	}
}

// Prepare's rebuild broadcasts rank 0's ready order; while rank 1 waits
// there for a rank 0 that has not reached its second Prepare, rank 1's
// read-only methods answer, and an overlapping MarkReady is refused.
func TestReadOnlyMethodsAnswerWhilePrepareRebuilds(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 4, 2)
	gs := groupsOf(t, "tcp", 2)
	rs := make([]*Reducer, 2)
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		var err error
		if rs[rank], err = New(ctx, g, params, Options{BucketCapBytes: 64, FirstBucketBytes: 64}); err != nil {
			return err
		}
		return iterate(ctx, rs[rank], sameValues(params)) // records the ready order
	}))
	prepared := make(chan error, 1)
	go func() { prepared <- rs[1].Prepare(ctx, Iteration{Sync: true}) }() // waits in the rebuild's broadcast
	time.Sleep(100 * time.Millisecond)
	for name, call := range readOnlyCalls(rs[1]) {
		returned := make(chan struct{})
		go func() { call(); close(returned) }()
		select {
		case <-returned:
		case <-time.After(time.Second):
			t.Errorf("%s is still blocked after 1s while Prepare rebuilds", name)
		}
	}
	if err := rs[1].MarkReady(0, sameValues(params)[0]); err == nil ||
		!strings.Contains(err.Error(), "Prepare is waiting") {
		t.Errorf("MarkReady overlapping Prepare's rebuild: %v", err)
	}
	select {
	case err := <-prepared:
		t.Fatalf("Prepare returned before rank 0 broadcast its order: %v", err)
	default:
	}
	noErrors(t, []error{rs[0].Prepare(ctx, Iteration{Sync: true}), <-prepared})
	for rank, r := range rs {
		if r.ReadyOrder() == nil {
			t.Errorf("rank %d: no ready order after the rebuild", rank)
		}
	}
	noErrors(t, onGroups(gs, func(rank int, _ pg.ProcessGroup) error {
		grads := sameValues(params)
		for i := len(grads) - 1; i >= 0; i-- {
			if err := rs[rank].MarkReady(i, grads[i]); err != nil {
				return err
			}
		}
		return rs[rank].Finalize(ctx)
	}))
}

// MarkReady from many goroutines at once: whoever drains performs the
// others' actions in the machine's order, so every rank still launches
// its buckets in index order and gets the average.
func TestConcurrentMarkReadyKeepsLaunchOrder(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(8, 8, 8, 8, 4)
	gs := groupsOf(t, "tcp", 2)
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		r, err := New(ctx, g, params, Options{BucketCapBytes: 300, FirstBucketBytes: 300})
		if err != nil {
			return err
		}
		for it := range 20 {
			grads := make([]pg.Tensor, len(params))
			for i, p := range params {
				grads[i] = pg.Float64s(uniform[float64](p.Numel(), uint64(it), uint64(i*2+rank), 1))
			}
			want := make([][]float64, len(params))
			for i, p := range params {
				a, b := uniform[float64](p.Numel(), uint64(it), uint64(i*2), 1), uniform[float64](p.Numel(), uint64(it),
					uint64(i*2+1), 1)
				want[i] = make([]float64, len(a))
				for k := range a {
					want[i][k] = a[k]/2 + b[k]/2
				}
			}
			if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
				return err
			}
			errs := parallel(len(params), func(i int) error { return r.MarkReady(i, grads[i]) })
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if err := r.Finalize(ctx); err != nil {
				return err
			}
			for i := range params {
				if got := pg.View[float64](grads[i]); fmt.Sprint(got) != fmt.Sprint(want[i]) {
					return fmt.Errorf("iteration %d parameter %d: %v, want %v", it, i, got, want[i])
				}
			}
		}
		return nil
	}))
}
