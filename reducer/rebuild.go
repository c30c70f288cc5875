package reducer

import (
	"fmt"
	"slices"

	"github.com/goddp/ddp/pg"
	"go.uber.org/zap"
)

// rebuildBuckets replans the buckets in rank 0's gradient-ready order
// (the machine's rebuild: it recorded order, this rank's). Every rank
// uses rank 0's order, broadcast, so the plans agree even when ranks saw
// gradients arrive in different orders. Inside an accumulation window
// (carry) the sums so far move into the new buckets.
func (r *Reducer) rebuildBuckets(order []int, carry bool) error {
	ctx := r.iter.ctx
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
	l := r.newLayout(plan, limits)
	if carry {
		for i := range r.params {
			copy(l.view(i).Data, r.layout.view(i).Data)
		}
	}
	r.mu.Lock()
	r.layout = l
	_, _ = r.m.step(evReplanned{plan: plan}, nil) // takes any plan
	r.mu.Unlock()
	r.obs.rebuilt(r, order) // observe.go
	r.log.Info("Reducer buckets have been rebuilt in this iteration.",
		zap.Ints("ready_order", order), zap.Ints("bucket_bytes", l.bucketBytes()))
	return nil
}

// ReadyOrder returns the gradient-ready order recorded for the rebuild,
// or nil before it is complete.
func (r *Reducer) ReadyOrder() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.m.status().readyOrder)
}
