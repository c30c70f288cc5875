package backend

import (
	"context"

	"github.com/goddp/ddp/pg"
)

// DeviceBucketAllocator is implemented by process groups whose
// collectives run on device memory (pg/nccl's Group). A reducer that
// finds it on its group keeps its gradient buckets on the device: see
// DeviceBucket. Host-only backends do not implement it.
type DeviceBucketAllocator interface {
	// NewDeviceBucket allocates a bucket of numel elements of d in device
	// memory and, with register, registers it with the backend as the
	// backend's policy says (pg/nccl: NCCL symmetric windows, else
	// user-buffer registration, else none); without, it is plain device
	// memory (for buckets that will soon be replaced). Registration may
	// be collective: every rank must make the same calls in the same
	// order, as for a collective.
	NewDeviceBucket(ctx context.Context, d pg.Dtype, numel int, register bool) (DeviceBucket, error)
}

// DeviceBucket is a flat buffer in device memory with a copy stream of
// its own, so that filling it overlaps with the caller's work and the
// collectives on it wait for the copies on the device, not on the host.
//
// One round is: Upload each part as it becomes ready, Seal, issue the
// collective on Tensor, wait for its Work, Download. A bucket is used by
// one goroutine at a time.
type DeviceBucket interface {
	// Tensor is the bucket as a device tensor, for the group's collectives.
	Tensor() pg.Tensor
	// Upload copies src into the bucket at element off, asynchronously on
	// the copy stream. A host src is first copied into pinned staging
	// memory, so the caller may reuse src when Upload returns; a device
	// src must be complete on the device. src's dtype must be the
	// bucket's.
	Upload(off int, src pg.Tensor) error
	// Seal marks the uploads so far as the input of the next collective:
	// the next collective issued on the group waits on the device for an
	// event recorded after them.
	Seal() error
	// Download copies the bucket's elements [off, off+dst.Len()) into dst
	// (host or device) once the collective's Work is done, and returns
	// when they are there or ctx ends.
	Download(ctx context.Context, off int, dst pg.Tensor) error
	// Registration says how the bucket is registered with the backend,
	// e.g. "window", "register" or "none".
	Registration() string
	// Close deregisters and frees the bucket. The group's Close releases
	// the buckets still open.
	Close() error
}
