// Package nccl is the NCCL process group: pg.Extended on NVIDIA's NCCL,
// as c10d's ProcessGroupNCCL, through the run-time bindings of package
// github.com/goddp/ddp/nccl (no cgo; the binary runs where NCCL is
// absent and fails New there with an error that says where it looked).
//
//	lib, err := libnccl.Load(libnccl.Options{PythonPrefixes: []string{"/opt/torch/.venv"}})
//	cu, err := libnccl.LoadCUDA(libnccl.CUDAOptions{})
//	g, err := pgnccl.New(ctx, st, pgnccl.Options{Rank: rank, Size: size, Device: localRank, Library: lib, CUDA: cu})
//	w := g.AllReduce(ctx, pg.Float32s(grads), pg.Op(pg.Avg))
//
// # Design
//
// Setup: rank 0 publishes an ncclUniqueId in the store; every rank makes
// its communicator non-blocking (ncclCommInitRankConfig, blocking=0, NCCL
// 2.14+), so that a rendezvous that never completes is aborted when ctx
// or the group timeout ends.
//
// Host tensors are staged: caller's slice -> pinned host buffer -> device
// buffer -> NCCL -> device -> pinned -> caller's slice. Buffers come from a
// per-group pool of power-of-two size classes and are reused. The device
// never touches Go memory, and a failed collective leaves the caller's
// tensor untouched.
//
// Device tensors (pg.DeviceTensor, on the group's GPU) go to NCCL as they
// are, with no staging. The group's stream does not wait on the caller's:
// the data must be complete on the device when the call is made, and the
// results are there when the Work is done. A call mixing host and device
// tensors is refused; so are, on device tensors, BAND/BOR/BXOR and
// PREMUL_SUM on a world of one (docs/nccl.md).
//
// Streams and completion: each group has one CUDA stream. A collective is
// enqueued under the group's issue lock (NCCL needs calls on a
// communicator serialised and in the same order on every rank), followed
// by a CUDA event; the Work completes when the watchdog sees the event
// pass and has copied the result back.
//
// Watchdog: one goroutine per group polls the pending Works' events (every
// PollInterval while any is pending), their deadlines (the group timeout
// from issue, or the Work's ctx) and ncclCommGetAsyncError (every
// AsyncErrorInterval). On a timeout or an asynchronous error it calls
// ncclCommAbort and fails every pending Work with a *pg.CollectiveError
// naming the collective and its sequence number (pg.ErrTimeout,
// pg.ErrRemote for ncclRemoteError, pg.ErrComm otherwise); the group then
// refuses new work, as ProcessGroupNCCL after an abort.
//
// Flight recorder: the group keeps none of its own; it is recorded by the
// pg/flight Recorder put over it (flight.Wrap, which sizes the ring by
// Options.FlightRecorderSize), and the watchdog's times reach that ring
// through the Works (pg.TimedWork): when each collective was found
// started and completed from its CUDA events, and, with
// Options.EnableTiming, its GPU time (torch's duration_ms). On a timeout
// the watchdog logs the Recorder and, with Options.FlightDumpDir, dumps
// it in torch's layout. FlightRecorder returns it. See Note [one flight
// recorder].
//
// Collectives: AllReduce, Broadcast, AllGather, ReduceScatter and Reduce
// map to NCCL's; BAND/BOR/BXOR, which NCCL lacks, are an ncclAllGather
// reduced on the host; AVG is ncclAvg (2.10); PREMUL_SUM is
// ncclRedOpCreatePreMulSum (2.11). Gather, Scatter and AllToAll are
// grouped ncclSend/ncclRecv, the coalesced collectives one NCCL group,
// Barrier an allreduce of one float, Split and NewGroup ncclCommSplit
// (2.18), MonitoredBarrier a store protocol (NCCL has none; c10d uses
// Gloo). Send and Recv are ncclSend/ncclRecv: NCCL matches them by order
// and has no tags, so, as in ProcessGroupNCCL, tags are not matched.
//
// Send and Recv run on a two-rank communicator per direction between two
// ranks (docs/nccl.md).
//
// Device buckets: Group implements backend.DeviceBucketAllocator. A bucket is
// device memory registered with NCCL as the registration policy says
// (chosen at the first bucket from the loaded library and logged:
// symmetric windows, ncclMemAlloc + ncclCommWindowRegister, on NCCL
// 2.27+; else ncclCommRegister, 2.19+; else none; a failed registration
// falls back to the next, logged). Uploads go through pinned staging
// memory on a copy stream of the group's own; Seal records an event
// there, and the next collective's stream waits on it (cuStreamWaitEvent)
// rather than the host. Close releases every registration before the
// communicator is destroyed.
//
// Package nccltest makes Groups over the binding's test double (device
// memory is host memory, NCCL calls run on pg/local), for tests of code
// that drives an NCCL group on machines without a GPU; NewOnBackend is
// its seam into this package.
package nccl
