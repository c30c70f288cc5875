package fake

import "github.com/goddp/ddp/libnccl"

// The knobs tests turn and the counters they read. Faults take effect at
// the next NCCL call; counters count from the backend's making.

// StallNext makes the next NCCL call block the stream until Abort, as a
// collective whose peer never arrives.
func (b *Backend) StallNext() { b.stall.Store(true) }

// FailNext makes the next NCCL call fail with err when it is enqueued.
func (b *Backend) FailNext(err error) { b.failNext.Store(&err) }

// InjectAsyncError makes ncclCommGetAsyncError report code, and
// ncclGetLastError detail, as after a peer died.
func (b *Backend) InjectAsyncError(code libnccl.Result, detail string) {
	b.detail.Store(detail)
	b.asyncErr.Store(int32(code))
}

// Aborted reports whether the communicator was aborted.
func (b *Backend) Aborted() bool { return b.aborted.Load() }

// Closed reports whether Close has run.
func (b *Backend) Closed() bool { return b.closed.Load() }

// Calls is how many NCCL calls were enqueued.
func (b *Backend) Calls() int64 { return b.calls.Load() }

// Freed is how many device buffers were freed.
func (b *Backend) Freed() int64 { return b.freed.Load() }

// PairsMade is how many ends of two-rank communicators the world made,
// counting each rank's.
func (b *Backend) PairsMade() int64 { return b.pairs.made.Load() }

// Alloc allocates n bytes of fake device memory, for a test's device
// tensors.
func (b *Backend) Alloc(n int) libnccl.DevicePtr { return b.mem.alloc(n) }

// At is the host memory behind the n bytes of fake device memory at p.
func (b *Backend) At(p libnccl.DevicePtr, n int) []byte { return b.mem.at(p, n) }

// FailMemAlloc, FailRegister and FailWindows make every later
// ncclMemAlloc, ncclCommRegister or ncclCommWindowRegister fail.
func (b *Backend) FailMemAlloc() { b.dev.failMemAlloc.Store(true) }

// FailRegister: see FailMemAlloc.
func (b *Backend) FailRegister() { b.dev.failRegister.Store(true) }

// FailWindows: see FailMemAlloc.
func (b *Backend) FailWindows() { b.dev.failWindow.Store(true) }

// Live is how many registrations and windows are held now (not yet
// deregistered).
func (b *Backend) Live() int { return b.dev.live() }

// Made is how many registrations and windows were made in all.
func (b *Backend) Made() int { return int(b.dev.windows.Load() + b.dev.registrations.Load()) }

// MemAllocs is how many ncclMemAlloc calls succeeded.
func (b *Backend) MemAllocs() int64 { return b.dev.memAllocs.Load() }

// Trace is the device-side calls in the order they ran: "h2d", "d2h",
// "d2d" and "event" on the copy stream, "wait"/"waited" around a
// collective stream's wait for an upload, "allReduce", and the
// allocation and registration calls.
func (b *Backend) Trace() []string { return b.dev.traced() }

// HoldCopies stops the copy streams at their current point until the
// returned function is called.
func (b *Backend) HoldCopies() (release func()) { return b.dev.holdCopies() }
