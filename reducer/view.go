package reducer

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"
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
func (r *Reducer) CopyStats() CopyStats { return r.copies.stats() }

// copyCounters are CopyStats as the reducer counts them: atomically, since
// the copies run without its lock.
type copyCounters struct{ in, out, inPlace, fallbacks atomic.Int64 }

func (c *copyCounters) stats() CopyStats {
	return CopyStats{In: c.in.Load(), Out: c.out.Load(), InPlace: c.inPlace.Load(), Fallbacks: c.fallbacks.Load()}
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
	return r.m.status().window
}

// sameMemory reports whether a and b are the same bytes.
func sameMemory(a, b pg.Tensor) bool {
	return len(a.Data) == len(b.Data) && len(a.Data) > 0 && unsafe.SliceData(a.Data) == unsafe.SliceData(b.Data)
}

// Note [one memory per result]
//
// Finalize writes each parameter's result into the gradient MarkReady
// was given for it. If two of those gradients share memory, the second
// result overwrites the first, and the first parameter silently steps
// with another's gradient: replicas then drift from torch, and from each
// other when the ranks' graphs differ. An engine can hand over shared
// memory without knowing it: Gorgonia hash-conses two identical gradient
// expressions into one node (ddp.Wrap copies those; see
// autogradhooks.SharedGradients). So before writing back, Finalize checks
// that the host gradients it writes are pairwise disjoint, and fails,
// naming both parameters, when they are not. It is a sort of one span per
// parameter, once per synchronised iteration.

// memSpan is the memory of one gradient.
type memSpan struct {
	start, end uintptr
	param      int
}

// checkDisjoint fails when two of the gradients Finalize is about to write
// into overlap: Note [one memory per result].
func (r *Reducer) checkDisjoint() error {
	s := r.spans[:0]
	for i, dst := range r.dst {
		if len(dst.Data) == 0 || dst.IsDevice() {
			continue
		}
		start := uintptr(unsafe.Pointer(unsafe.SliceData(dst.Data)))
		s = append(s, memSpan{start: start, end: start + uintptr(len(dst.Data)), param: i})
	}
	r.spans = s
	slices.SortFunc(s, func(a, b memSpan) int { return cmp.Compare(a.start, b.start) })
	for k := 1; k < len(s); k++ {
		if s[k].start < s[k-1].end {
			a, b := min(s[k-1].param, s[k].param), max(s[k-1].param, s[k].param)
			return fmt.Errorf("%w: the gradients given to MarkReady for parameters %d (%s) and %d (%s) overlap, so one result "+
				"would overwrite the other; give each parameter's gradient memory of its own (copy one of them before MarkReady)",
				ErrSharedGradients, a, r.params[a].Name, b, r.params[b].Name)
		}
	}
	return nil
}
