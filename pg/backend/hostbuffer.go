package backend

import "github.com/goddp/ddp/pg"

// HostBufferAllocator is implemented by process groups whose collectives
// run faster on host memory they hand out themselves: pg/tcp allocates it
// in shared memory that the ranks on the same host have mapped, so that
// an AllReduce on it reads the peers' tensors in place instead of copying
// them through its slots. A reducer that finds it (through pg.As) keeps its
// gradient buckets there. A collective on other memory still works; it is
// only slower.
type HostBufferAllocator interface {
	// NewHostBuffer allocates numel zeroed elements of d. It fails when
	// the group has no such memory or no room left; the caller then
	// uses memory of its own.
	NewHostBuffer(d pg.Dtype, numel int) (HostBuffer, error)
}

// HostBuffer is memory from a HostBufferAllocator.
type HostBuffer interface {
	// Tensor is the buffer. It must not be used after Close.
	Tensor() pg.Tensor
	// Close returns the memory to the group. Closing twice is an error.
	Close() error
}
