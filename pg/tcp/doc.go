// Package tcp is a pure-Go process group over TCP, goddp's counterpart
// of c10d's gloo backend. A Group is one rank and implements pg.Extended:
// every collective of c10d's Backend, Send and Recv, subgroups and
// completion hooks. New joins it:
//
//	st := store.NewHashStore(store.HashStoreOptions{}) // or a store.TCPStore across processes
//	g, err := tcp.New(ctx, st, tcp.Options{
//		Rank: rank, Size: size, Secret: secret,
//		ListenAddr: "127.0.0.1:0", // loopback for a single-machine job
//	})
//	defer g.Close()
//	err = g.AllReduce(ctx, pg.Float32s(grads), pg.Op(pg.Avg)).Wait(ctx)
//
// # Mesh and rendezvous
//
// Every pair of ranks shares one TCP connection. Each rank listens on
// Options.ListenAddr, claims its rank in the store ("tcp/rank/<rank>",
// compare-and-set), publishes its address under "tcp/addr/<rank>", dials
// every higher rank and accepts every lower one. Two processes claiming
// one rank make every rank fail at once with a *DuplicateRankError
// (ErrDuplicateRank) naming the rank and both processes, instead of
// timing out (Note [duplicate ranks], claim.go).
// Groups sharing a store must use a store.PrefixStore each. Connections
// get TCP_NODELAY, and kernel buffers that autotune to several MiB (or
// the size Options.SocketBuffer pins).
//
// # Authentication
//
// Every connection runs the wire package's mutual HMAC-SHA256 challenge
// with the job's secret before anything else is read from it: the dialer
// proves it holds the secret and names its rank in the hello, the
// accepting side proves it too and answers with its own rank in a hello
// frame. A connection that fails is closed and logged at Warn with its
// remote address, rate-limited as the store's refusals are (the first of
// an interval, then a count: Note [rate-limited refusals] in
// pg/internal/shedlog); the accepting side authenticates each connection in
// its own goroutine and keeps accepting, so an intruder cannot hold up
// the job. The listener closes once the mesh is complete. The hellos also
// carry RingThreshold and ChunkBytes, which decide how a collective is cut
// into frames: ranks configured differently refuse each other with
// pg.ErrMismatch instead of misreading each other later.
//
// # Framing and matching
//
// After the handshake a connection carries wire frames: a 20-byte header
// (kind, sequence number, tag, length) and a payload of at most
// Options.MaxFrame bytes, decoded without reflection. Collectives are
// asynchronous and may be issued many at a time; each takes the group's
// next sequence number (the same on every rank, since ranks issue
// collectives in the same order), and each step of its algorithm a tag,
// so (seq, tag) names every frame. A reader goroutine per connection
// reads frames as they come: a frame whose destination has been posted
// is read straight into it (the output tensor, with no copy); any other
// is kept in a pooled buffer in the connection's mailbox until its
// collective asks for it, which is how frames of a later collective that
// arrive early wait. That buffer grows as the bytes arrive, unless the
// pool has one of the size to spare, so a peer that announces a large
// frame and sends little costs what it sent. A writer goroutine per connection sends queued frames
// with writev, several at a time, so the executor reduces one chunk while
// the next is on the wire.
//
// # Algorithms
//
// One executor goroutine per group runs collectives one at a time in
// issue order, each algorithm in its own file:
//
//   - AllReduce below Options.RingThreshold bytes: recursive doubling
//     (doubling.go), lg n exchanges of the whole buffer, with the ranks
//     beyond the largest power of two folded in first and sent the
//     result last. Latency-optimal.
//   - AllReduce from RingThreshold up: the ring (ring.go), a
//     reduce-scatter then an allgather, each of the n segments cut into
//     chunks of Options.ChunkBytes and pipelined, so every rank sends
//     2(n-1)/n of the buffer: bandwidth-optimal.
//   - Broadcast: a binomial tree, pipelined by chunk (broadcast.go).
//   - AllGather and ReduceScatter: rings (allgather.go, reducescatter.go).
//   - Broadcast, AllGather, ReduceScatter, Reduce, Gather, Scatter and
//     AllToAll when every rank shares this host: through shared memory
//     (internal/shm, see below) instead of the trees, rings and
//     flat exchanges.
//   - Barrier: the dissemination barrier (barrier.go).
//   - MonitoredBarrier: c10d's, through rank 0 (monitored.go).
//   - Reduce: a binomial tree towards the root, pipelined by chunk; ranks
//     with children sum into scratch, so only the root's tensor changes
//     (reduce.go).
//   - Gather and Scatter: flat, every rank to or from the root, straight
//     into place (gather.go, scatter.go).
//   - AllToAll, equal or uneven chunks (c10d's alltoall_base): a pairwise
//     exchange, every destination posted first (alltoall.go). Each pair
//     first exchanges its chunk's length, so that ranks whose splits
//     disagree fail with pg.ErrMismatch naming the peer and the split,
//     never writing outside a chunk.
//   - AllReduceCoalesced, AllGatherCoalesced, ReduceScatterCoalesced: one
//     collective, one sequence number, one Work; the tensors of each
//     dtype are packed into one buffer and moved by the plain algorithm
//     (coalesced.go). The frames of each dtype's part carry its index in
//     the header's flags.
//
// Every reduced element is combined by the kernel package's commutative
// kernels and, in the ring, by exactly one rank before being copied to
// the others, so every rank gets the same bits. AVG and PREMUL_SUM scale
// each rank's own input first (kernel.Prepare); integer AVG divides at
// the end (kernel.Finish).
//
// # Sequence numbers and completion hooks
//
// Work.Seq numbers a group's collectives from 1 (the frames on the wire
// carry Seq-1), the same on every rank; Send and Recv are numbered apart,
// per peer and direction, from 1. OnCompletion hooks get a pg.WorkInfo
// for every Work the group issued, collectives in sequence order, on one
// goroutine of the group's, until Close.
//
// # Send and Recv
//
// Send and Recv bypass the executor: they are not in the collective
// sequence, a pending Recv never holds up a collective nor a collective a
// Recv, and they need not be issued in the same order on every rank (see
// Note [point to point] in p2p.go). A message goes out in frames of at
// most ChunkBytes, back to back; the receiver matches it, in order, to
// the oldest Recv from that peer with the same tag (messages with one tag
// never overtake each other), buffering messages that come before their
// Recv. The Send's Work finishes once that Recv has taken the message,
// as in gloo. A Recv whose tensor is not the message's length fails with
// pg.ErrInvalidArgument, and so does the Send. Each Work fails with
// pg.ErrTimeout, naming the peer, if it has not finished a group timeout
// after it was issued (the group goes on, and a message that comes later
// goes to the next Recv with its tag); its ctx ending fails just that
// Work. A peer that dies or closes fails every pending Send and Recv with
// it, naming it. There is no receive from any source: name the peer.
//
// # Subgroups
//
// NewGroup (c10d's new_group) and Split (ncclCommSplit) are collectives
// of the parent: one allgather on it, which also checks that the ranks
// agree. The members then build a new Group, with its own mesh of
// authenticated connections, executor and sequence numbers, and the
// parent's Options, rendezvousing through the parent's store under the
// prefix "sub/<seq>/<color>" (seq being that allgather's), which every
// rank knows without asking. Ranks not in a subgroup get nil. A subgroup
// fails alone: errors name the peer's subgroup rank, and say its rank in
// the parent. Closing the parent does not close its subgroups.
//
// # Shared memory
//
// On Linux, the ranks of a group that share a host (same boot id, and
// able to reach each other's abstract Unix socket, hence in one network
// namespace) move AllReduce's data between them through shared memory:
// each rank's anonymous memfd segment, handed only to peers that pass the
// HMAC handshake on that socket and closed once mapped, so nothing is
// left in /dev/shm or /proc/<pid>/fd and a killed rank leaves nothing
// behind. When every rank of the group shares this host, Broadcast,
// AllGather, ReduceScatter, Reduce, Gather, Scatter and AllToAll (and the
// coalesced forms of the first three) go through shared memory too.
// Waits spin briefly, then sleep on a futex in the segment while
// watching the peer's TCP connection, the deadline and the group's
// failure. The barriers, Send and Recv, and every control frame stay on
// TCP. Options.NoSharedMemory turns it off for a rank, which then uses
// TCP with every peer.
//
// Each segment ends in an arena (Options.SharedArenaBytes) from which
// NewHostBuffer (backend.HostBufferAllocator) hands out buffers; the reducer
// keeps its gradient buckets there. An AllReduce whose tensors are host
// buffers on every rank skips the copies through the segments: each rank
// reduces its shard of every rank's tensor straight into every rank's
// tensor, as pg/local's goroutine ranks do, with the same bits
// (InPlaceAllReduces counts them).
//
// The ranks agree on who shares memory through the store: each publishes
// its host's identity and socket, maps the segments of the peers with
// the same identity, and publishes which it mapped; from these every rank
// computes every host's world, the largest set of the host's ranks that
// all mapped each other (dropping, one at a time, the rank that could
// share with the fewest, so a rank in another namespace falls back to TCP
// alone), and so the ranks of a host always agree. Each rank logs one
// "link transports" line: the ranks it reaches over shared memory, those
// over TCP, the hosts' leaders, and why a host's rank is not shared with.
//
// When the world is the whole group, each rank reduces its shard of
// every 4 MiB chunk straight from all segments and copies the others'
// shards out (internal/shm). The other collectives cut
// their tensors into chunks of a slot the same way, in the same sequence
// of chunks, and each rank reads straight from the peers' slots: for
// Broadcast, the non-roots copy root's chunk out; for AllGather, every
// rank copies every rank's chunk out; for ReduceScatter, every rank
// copies the n pieces of its input that make a chunk into its slot and
// folds piece me of every slot, in rank order, into its output; Reduce is
// AllReduce with only the root copying the reduced shards out; for
// Gather, root copies every peer's chunk out; for Scatter, root's slot
// holds one piece per rank and each rank copies its own out; for
// AllToAll, every slot holds one piece per rank, each rank copies piece
// me of every peer's slot out, and the first chunk also carries every
// rank's split sizes, which each receiver checks against its own, and
// the largest, which sets how many chunks run. Every chunk carries its
// call (op, size, dtype, reduce op, root), which every
// rank compares with every peer's, so ranks that issue different
// collectives or arguments fail with pg.ErrMismatch naming the peer.
//
// When the group spans hosts and some host holds several ranks,
// AllReduce is hierarchical (shm_hier.go, with its shared-memory steps in
// internal/shm/hier.go; the other collectives then use
// TCP): each host's ranks reduce into the host's leader, its lowest rank,
// through shared memory (the leader folds the members' slots and its own
// tensor in rank order); the leaders alone allreduce over TCP, with the
// ring or recursive doubling between them; and each leader broadcasts
// the result to its host through shared memory. Only leaders send data
// between hosts, and every rank ends with the leaders' bits. Subgroups
// (NewGroup, Split) agree on their own worlds the same way, from their
// own ranks. BenchmarkHierAllReduce compares 4 ranks as 2 simulated
// hosts × 2, hierarchical, with the same ranks on TCP alone: on the
// shared 2-core development machine the hierarchical allreduce took
// 1.3-1.5× less time (median of 6 runs, noisy) and 1.4-1.7× less CPU at
// 4 KiB, 1 MiB and 64 MiB (docs/process-groups.md has the figures and
// the command).
//
// # Failures
//
// No collective waits forever. Each has a deadline (Options.Timeout from
// when it was issued) and fails with pg.ErrTimeout naming the rank it was
// waiting for. A connection that drops, or carries a frame that is
// malformed, too large or of the wrong size, fails what needs that peer
// with pg.ErrComm (pg.ErrMismatch for a size) naming it; a peer that
// closes its group says goodbye first, so the error is pg.ErrRemote (and
// the goodbyes heard together are logged in one line: Note [one goodbye
// line]). A
// collective that fails fails the whole group, since the ranks are out of
// step: pending and later collectives fail with the same cause, and the
// rank sends every peer an abort frame naming the rank at the root of the
// failure, so that ranks not even talking to it fail at once with
// pg.ErrRemote instead of timing out (see Note [abort and relay]). A
// collective's Work completes only once no reader can write into its
// buffers and the peers have been told. Abort fails everything with
// pg.ErrAborted; the end of a collective's ctx aborts the group; Close
// releases every goroutine and socket and is idempotent.
package tcp
