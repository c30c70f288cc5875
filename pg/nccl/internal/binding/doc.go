// Package binding is the seam between a pg/nccl Group and the NCCL and
// CUDA calls it makes for one communicator: device and pinned memory,
// the group's stream, the collectives enqueued on it, the copy stream of
// device buckets and the communicator's life cycle.
//
// pg/nccl runs a Group on a Backend: in production one over the
// run-time bindings of package github.com/goddp/ddp/nccl, in tests the
// fake of pg/nccl/internal/fake, which moves data through pg/local. The
// interface lives here, apart from both, so that pg/nccl's production
// code does not depend on the fake (nor the fake on pg/nccl), and so
// that pg/nccl's own tests can use the fake without an import cycle.
// It is internal: the one way for code outside pg/nccl to reach it is
// package pg/nccl/nccltest.
//
//	var be binding.Backend = ... // cudaBackend or *fake.Backend
//	err := be.AllReduce(send, recv, n, binding.DataType(pg.Float32), libnccl.Sum)
package binding
