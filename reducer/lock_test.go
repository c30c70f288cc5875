package reducer

import (
	"fmt"
	"testing"
	"time"

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
	noErrors(t, onGroups(gs, func(rank int, _ pg.ProcessGroup) error { return iterate(ctx, rs[rank], sameValues(params)) }))
}
