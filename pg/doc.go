// Package pg is goddp's process-group interface, after PyTorch c10d's
// Backend: a set of ranks that run collectives together. The data-parallel
// reducer moves every gradient through it.
//
// # The interface
//
// [ProcessGroup] has the collectives AllReduce, Broadcast, AllGather,
// ReduceScatter and Barrier, plus Rank, Size, Abort and Close. Optional
// abilities are separate small interfaces rather than a growing
// interface: [MonitoredBarrierer] (a barrier that names the ranks that did
// not arrive), [Backender] (the backend's name, see [BackendName]), and
// the rest of c10d's Backend ([Rooted], [AllToAller], [PointToPoint],
// [Coalescer], [Splitter], [CompletionHooker]; [Extended] is all of them).
//
// # Wrappers and abilities
//
// Ask a group for an ability with [As], never with a type assertion: a
// group is often a wrapper (pg/desync, pg/instrument, the reducer's view
// of a comm hook's group), and As looks behind it as errors.As does,
// through each wrapper's Inner ([Wrapper]):
//
//	var p2p pg.PointToPoint
//	if !pg.As(g, &p2p) { return fmt.Errorf("need Send and Recv, which a %s group lacks", pg.BackendName(g)) }
//
// A wrapper never hides an ability of the group inside it. An ability the
// wrapper does not implement is found on the group inside, and calls
// through it bypass the wrapper; so a wrapper that must see every call
// (one that counts bytes or checks collectives) implements the ability
// itself or hands out a forwarding view from an As method. Note [wrappers
// keep abilities] in as.go has the rules.
//
// Every collective is asynchronous: it returns at once with a [Work], whose
// Done channel closes when the collective has finished and whose Err is
// then its result; Wait(ctx) blocks for it. Backends return a [*Future].
// Many collectives may be in flight on one group; every rank must issue
// the same collectives in the same order, and the tensors passed in belong
// to the group until their Work is done.
//
//	w := g.AllReduce(ctx, pg.Float32s(grad), pg.Op(pg.Avg))
//	// ... more work, more collectives ...
//	if err := w.Wait(ctx); err != nil { ... }
//
// # Tensors, dtypes and ops
//
// A [Tensor] is a flat little-endian buffer of one [Dtype]: Float32,
// Float64, Float16, BFloat16, Int32, Int64 or Uint8. Float32s and its
// siblings view a Go slice as a Tensor without copying, so a collective
// writes straight into the caller's slice; [View] goes the other way.
// Float16 and BFloat16 hold bit patterns and are reduced in float32, then
// rounded to nearest even.
//
// A [ReduceOp] has c10d's meanings: SUM, AVG, PRODUCT, MIN, MAX,
// PREMUL_SUM (with its factor, [PremulSumOp]) and, on integers only, BAND,
// BOR and BXOR. AVG on floats scales each input by 1/size and sums, as NCCL
// does; on integers it sums and divides, truncating toward zero.
//
// # Errors
//
// Every error wraps one of the sentinels, for errors.Is: [ErrTimeout],
// [ErrComm] and [ErrRemote] (c10d's TIMEOUT, COMM_ERROR and REMOTE_ERROR),
// [ErrAborted], [ErrClosed], [ErrInvalidArgument], [ErrMismatch] and
// [ErrUnauthenticated]. A failed collective returns a [*CollectiveError]
// naming the op, this rank and the peer involved; a monitored barrier that
// times out returns a [*MissingRanksError] listing the ranks that never
// came. No collective blocks forever: each is bounded by the group timeout
// ([DefaultTimeout], 30 minutes, unless the backend is told otherwise) and
// by its ctx.
//
// # Bad calls
//
// A call with a nil ctx, tensors without a dtype or
// without the data it needs, or a root, peer, tag, op, color or rank list
// that does not exist fails with [ErrInvalidArgument] on the rank that
// made it, before the backend takes a sequence number or a lock, so the
// group stays in step and goes on working. After Close every call fails,
// a well-formed one with [ErrClosed]; Abort and a second Close return. No
// backend in this module panics or hangs on a bad call, and their issue
// paths unlock by defer, so that a panic below them cannot leave the
// group wedged; pg/pgtest holds every backend to this.
//
// # Backends
//
//   - pg/local: N ranks as goroutines in one process, sharing memory. Each
//     rank reduces its own shard straight from its peers' buffers, so an
//     allreduce runs near memory bandwidth. For tests, examples and
//     several replicas on one machine.
//   - pg/tcp: ranks in separate processes or machines over TCP in pure Go,
//     with a ring for large buffers and a latency-optimal algorithm for
//     small ones, every connection authenticated with the job's secret.
//     Ranks find each other through a pg/store rendezvous store.
//
// Every backend runs the conformance suite in pg/pgtest.
//
// # The contract and the kit
//
// This package is the contract, what a program that trains a model or a
// comm hook imports; what a backend or wrapper author needs besides is in
// package pg/backend, as database/sql/driver is beside database/sql: the
// argument checks every backend runs before issuing a call (so all refuse
// the same bad calls with the same errors), the completion-hook
// dispatcher, the half-precision conversions and tensor arithmetic, the
// host and device bucket abilities the reducer looks for, and the network
// probes behind a [StallError]'s diagnosis. pg/backend imports pg and pg
// never imports it, so the contract cannot come to depend on one way of
// implementing it.
package pg
