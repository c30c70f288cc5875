// Package fake is a test double of NCCL and CUDA for pg/nccl: Backends
// that implement binding.Backend without a GPU. "Device" memory is host
// memory behind opaque device pointers, each stream (a group's, a copy
// stream, a point-to-point pair's) is a goroutine that runs its queue in
// order, and every NCCL call is carried out by a pg/local group of the
// same world, so data really moves between ranks. It models
// ncclMemAlloc, buffer registration and symmetric windows (a window
// registration is a barrier of the world, as NCCL's is collective) and
// cuStreamWaitEvent, and traces the order in which copies, events, waits
// and collectives run.
//
// It is internal to pg/nccl, so that pg/nccl's own tests can run Groups
// on it without an import cycle; other packages' tests reach it through
// pg/nccl/nccltest, which makes whole Groups.
//
//	bs, cleanup, err := fake.NewWorld(n, fake.Options{})
//	g := newGroup(bs[r], opts, st) // in pg/nccl; elsewhere nccltest.NewWorld
//	bs[r].StallNext()              // the next collective never finishes
package fake
