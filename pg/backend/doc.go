// Package backend is the kit for writing a process-group backend or a group
// wrapper: what pg/local, pg/tcp, pg/mpi, pg/nccl, pg/desync and
// pg/instrument share, and what a program that trains a model, or a comm
// hook, does not need. It stands to package pg as database/sql/driver
// stands to database/sql: pg holds the contract users program against
// (ProcessGroup, Work, Tensor, ReduceOp, the abilities found with pg.As and
// the errors users match); backend holds what implementing that contract
// takes. backend imports pg and pg never imports backend, so the contract
// cannot come to depend on one way of implementing it.
//
// # Argument checks
//
// [CheckAllReduce] and its siblings, one per collective, validate a call's
// arguments the same way for every backend: a backend calls them before it
// takes a sequence number or a lock, so a bad call fails with
// pg.ErrInvalidArgument on the rank that made it and the group stays in
// step (Bad calls, in package pg's documentation). [CheckContext] refuses a
// nil ctx. The checks refuse device tensors with pg.ErrDeviceTensor unless
// given [AcceptDevice].
//
// # Completion plumbing
//
// A backend returns its Works as *pg.Future (pg.NewSeqFuture, finished by
// Complete or CompleteAt). [Completions] is the dispatcher it embeds to
// implement pg.CompletionHooker: Deliver never blocks, and one goroutine
// calls the hooks in order.
//
// # Conversions and tensor arithmetic
//
// [F16ToF32], [F32ToF16], [BF16ToF32] and [F32ToBF16] convert half-precision
// bit patterns, rounding as c10's casts do; [Convert] casts a whole tensor
// between the floating-point dtypes and [Add] accumulates one into another.
// The backends reduce with them (pg/internal/kernel), and so do the reducer
// (gradient accumulation, mixed precision) and the comm hooks that compress.
//
// # Abilities a backend offers the layers above
//
// [HostBufferAllocator] (host memory the group reads in place: pg/tcp's
// shared memory), [DeviceBucketAllocator] (gradient buckets on the GPU:
// pg/nccl) and [PeerProber] (a network probe of a peer for pg/desync's
// diagnosis; [ProbeAddr] is the probe over TCP). The reducer and the
// wrappers find them with pg.As, as every ability.
//
// # Conformance
//
// A backend or wrapper built with this kit runs pg/pgtest, the one
// conformance suite every backend and wrapper in this module runs.
package backend
