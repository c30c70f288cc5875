package reducer

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// rebuildState follows c10d's bucket rebuild: record the order in which
// gradients became ready during one synchronised iteration, then, before
// the next one, rebuild the buckets in that order. Once per run.
type rebuildState struct {
	done      bool
	recording bool
	haveOrder bool
	order     []int
}

// finishRecording is called when a synchronised iteration completes.
func (s *rebuildState) finishRecording() {
	if s.recording {
		s.recording = false
		s.haveOrder = true
	}
}

// maybeRebuild runs at the start of a synchronised iteration. It either
// starts recording the ready order or, when one was recorded, rebuilds.
// The first static-graph iteration records nothing: its hooks only count.
func (r *Reducer) maybeRebuild(ctx context.Context) error {
	s := &r.rebuild
	switch {
	case s.done || !r.opts.rebuilds():
		return nil
	case s.haveOrder:
		return r.rebuildBuckets(ctx)
	case !r.static.first:
		s.recording = true
		s.order = s.order[:0]
	}
	return nil
}

// rebuildBuckets replans the buckets in rank 0's gradient-ready order.
// Every rank uses rank 0's order, broadcast, so the plans agree even when
// ranks saw gradients arrive in different orders.
func (r *Reducer) rebuildBuckets(ctx context.Context) error {
	order := r.completeOrder(r.rebuild.order)
	wire := make([]int64, len(order))
	for i, p := range order {
		wire[i] = int64(p)
	}
	if err := r.g.Broadcast(ctx, pg.Int64s(wire), 0).Wait(ctx); err != nil {
		return fmt.Errorf("reducer: broadcasting the gradient-ready order for the bucket rebuild: %w", err)
	}
	for i, p := range wire {
		order[i] = int(p)
	}
	plan, limits, err := r.assign(order, []int{r.opts.FirstBucketBytes, r.opts.BucketCapBytes}, true)
	if err != nil {
		return fmt.Errorf("reducer: rank 0's gradient-ready order %v is not usable here: %w", order, err)
	}
	old := r.layout
	r.install(plan, limits)
	if r.accumulate {
		for i := range r.params {
			copy(r.layout.view(i).Data, old.view(i).Data)
		}
	}
	r.rebuild.done, r.rebuild.order = true, nil
	r.obs.rebuilt(r, order) // observe.go
	r.log.Info("Reducer buckets have been rebuilt in this iteration.",
		zap.Ints("ready_order", order), zap.Ints("bucket_bytes", r.layout.bucketBytes()))
	return nil
}

// completeOrder appends, last index first, any parameter the recording
// missed (one that got no gradient, under StaticGraph), so the order
// covers every parameter.
func (r *Reducer) completeOrder(recorded []int) []int {
	seen := make([]bool, len(r.params))
	order := make([]int, 0, len(r.params))
	for _, p := range recorded {
		if !seen[p] {
			seen[p] = true
			order = append(order, p)
		}
	}
	for p := len(r.params) - 1; p >= 0; p-- {
		if !seen[p] {
			order = append(order, p)
		}
	}
	return order
}

// ReadyOrder returns the gradient-ready order recorded for the rebuild,
// or nil before it is complete.
func (r *Reducer) ReadyOrder() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.rebuild.haveOrder {
		return nil
	}
	return r.completeOrder(r.rebuild.order)
}
