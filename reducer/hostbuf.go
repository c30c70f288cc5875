package reducer

import (
	"errors"

	"go.uber.org/zap"

	"github.com/goddp/ddp/bucket"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Host buckets in the group's memory: a group that hands out host memory
// (backend.HostBufferAllocator: pg/tcp's shared-memory arena, which the ranks
// of a host read in place) gets the buckets' buffers from it, so the
// default hook's AllReduce on a bucket skips the copies through the
// segments. Where it fails (no shared memory with every peer, the arena
// full), the bucket lives on the heap as before, and the reducer logs why
// once. The results are the same bits either way.
//
// A layout's buffers are returned at Close, not at the rebuild that
// replaces it: views of the first layout's buckets (gradients handed out
// with GradientAsBucketView) may outlive the rebuild, and a returned
// buffer's memory is handed out again.

// hostBuffers is the reducer's part in that.
type hostBuffers struct {
	alloc  backend.HostBufferAllocator // nil: the heap
	bufs   []backend.HostBuffer        // every buffer taken, for Close
	logged bool                        // the fallback to the heap was logged
}

// initHostBuffers, from New before the first layout, notes whether the
// group hands out host memory (itself or behind wrappers, pg.As).
func (r *Reducer) initHostBuffers() {
	var a backend.HostBufferAllocator
	if pg.As(r.g, &a) {
		r.host.alloc = a
	}
}

// newBucket is bucket.New on the group's memory where it has room.
func (r *Reducer) newBucket(index int, params []int, limit int) *bucket.Bucket {
	dtype := r.dtypes[params[0]]
	if r.host.alloc == nil {
		return bucket.New(index, params, r.numel, dtype, limit)
	}
	return bucket.NewOn(index, params, r.numel, dtype, limit, func(d pg.Dtype, n int) pg.Tensor {
		b, err := r.host.alloc.NewHostBuffer(d, n)
		if err != nil {
			if !r.host.logged {
				r.host.logged = true
				r.log.Info("gradient buckets on the heap: the process group has no room for them in its own memory, so "+
					"collectives on them copy through it",
					zap.Int("bucket", index), zap.Error(err))
			}
			return pg.NewTensor(d, n)
		}
		r.mu.Lock()
		r.host.bufs = append(r.host.bufs, b)
		r.mu.Unlock()
		return b.Tensor()
	})
}

// closeHostBuffers returns every buffer taken from the group.
func (r *Reducer) closeHostBuffers() error {
	r.mu.Lock()
	bufs := r.host.bufs
	r.host.bufs = nil
	r.mu.Unlock()
	var errs []error
	for _, b := range bufs {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}
