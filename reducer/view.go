package reducer

import (
	"unsafe"

	"github.com/goddp/ddp/pg"
)

// Note [gradient as bucket view]
//
// With Options.GradientAsBucketView (torch's gradient_as_bucket_view) an
// engine computes, or at least places, each gradient straight into its
// slice of the bucket, GradientBuffer(i), and hands that very slice to
// MarkReady. MarkReady sees that the gradient shares the bucket's memory
// and copies nothing; Finalize leaves the result where it is, so the
// gradient the engine holds is the result, with no copy back. Inside an
// accumulation window (Accumulating true) the engine adds into the buffer
// instead of overwriting it, as autograd accumulates into a torch grad
// that is a bucket view.
//
// A gradient that does not share the bucket's memory (the engine could not
// place it, or the option is off) takes the ordinary path: copied in,
// copied back. Such a fallback is counted in CopyStats, so a caller can
// tell how much the views saved. The buffers move when the buckets are
// rebuilt (before the second synchronised iteration), so an engine asks
// for GradientBuffer(i) after each Prepare, never caches it across one.

// CopyStats counts the gradient bytes the reducer copied between the
// engine's gradients and its buckets since New. With GradientAsBucketView
// and an engine that places every gradient, In and Out stay 0.
type CopyStats struct {
	In        int64 // bytes copied (or added) from gradients into buckets
	Out       int64 // bytes copied from buckets back into gradients
	InPlace   int64 // bytes that were already in their bucket: no copy
	Fallbacks int64 // MarkReady calls, with GradientAsBucketView on, whose gradient was not its bucket view
}

// CopyStats returns the copy counters.
func (r *Reducer) CopyStats() CopyStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.copies
}

// GradientBuffer returns parameter i's slice of its bucket, in the
// gradient dtype: with GradientAsBucketView, where an engine writes the
// gradient so that MarkReady and Finalize copy nothing. It is valid from
// Prepare until the next Prepare (which may rebuild the buckets). While
// Accumulating reports true, the engine adds its gradient into it.
func (r *Reducer) GradientBuffer(i int) pg.Tensor {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.layout.view(i)
}

// Accumulating reports whether the iteration in progress adds to
// gradients kept from earlier no-sync iterations: an engine writing into
// GradientBuffer then adds rather than overwrites.
func (r *Reducer) Accumulating() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accumulate
}

// sameMemory reports whether a and b are the same bytes.
func sameMemory(a, b pg.Tensor) bool {
	return len(a.Data) == len(b.Data) && len(a.Data) > 0 && unsafe.SliceData(a.Data) == unsafe.SliceData(b.Data)
}
