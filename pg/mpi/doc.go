// Package mpi is a process group over MPI (Open MPI, MPICH), through cgo.
// It is built only with the mpi build tag (go build -tags mpi), so that a
// plain go build needs no MPI; without the tag the package is empty.
//
// Rank and size come from MPI itself: a job started by mpirun (or srun
// --mpi=pmix) calls mpi.New and needs no store, address or environment:
//
//	g, err := mpi.New(ctx, mpi.Options{Timeout: 5 * time.Minute, Logger: log})
//
// # Threads and progress
//
// One goroutine, locked to its OS thread, initialises MPI with
// MPI_Init_thread(MPI_THREAD_FUNNELED) and makes every MPI call of the
// process. Collectives are issued to it in order and posted as MPI's
// non-blocking calls; it polls the requests in flight with MPI_Test, so
// that many collectives, of the world and of subgroups, are in flight at
// once. MPI can be initialised once per process: New fails the second
// time; Close of the last group finalises MPI.
//
// # Buffers
//
// MPI keeps using the buffers of a non-blocking call after the cgo call
// returns, which cgo's pointer rules allow only for pinned Go memory.
// AllReduce and AllReduceCoalesced on tensors that need no conversion (not
// float16/bfloat16, no AVG or PREMUL_SUM scaling of floats), Broadcast and
// AllGather (unless in and out overlap) pin the tensors' backing arrays
// with runtime.Pinner for the Work's life and hand them to MPI as they
// are: no copies. Every other Work stages its tensors in C memory
// (C.malloc): the input is copied in when the call is made and the result
// copied out when MPI_Test reports the request done, on the MPI goroutine.
//
// # Mapping
//
// AllReduce is MPI_Iallreduce (in place), Broadcast MPI_Ibcast, AllGather
// MPI_Iallgather, ReduceScatter MPI_Ireduce_scatter_block, Barrier
// MPI_Ibarrier, Reduce MPI_Ireduce, Gather MPI_Igather, Scatter
// MPI_Iscatter, AllToAll MPI_Ialltoallv (equal splits too), Send and Recv
// MPI_Isend and MPI_Irecv of bytes with the caller's tag (MPI's
// non-overtaking rule gives the per-tag order pg.PointToPoint promises;
// tags above MPI_TAG_UB are refused). The coalesced collectives post one
// request per tensor and complete as one Work with one sequence number.
// NewGroup and Split are MPI_Comm_split (MPI_UNDEFINED for ranks left
// out); since MPI_Comm_split blocks, the ranks first allgather their
// colors, so a missing rank becomes a timeout of that allgather rather
// than a hang. MonitoredBarrier sends to and from rank 0 on a duplicate
// communicator and cancels (MPI_Cancel) what has not arrived by its
// timeout, returning a *pg.MissingRanksError without aborting anything.
//
// SUM, PRODUCT, MIN, MAX, BAND, BOR and BXOR are MPI's own ops. AVG on
// floats and PREMUL_SUM multiply every input by 1/size or the factor
// while it is copied in, then sum; AVG on integers sums and then divides,
// truncating toward zero, as pg.ReduceOp says. float16 and bfloat16 are
// widened to float32 while copied in, reduced by MPI as MPI_FLOAT and
// rounded back once when copied out (no user-defined MPI_Op is needed;
// the wire carries 4 bytes per element). Broadcast, gathers, scatters,
// all-to-all and point-to-point move them as MPI_UINT16_T, unchanged.
// uint8 SUM (and AVG) is the one user-defined MPI_Op, a wrapping sum:
// Open MPI 4.1's op/avx component sums MPI_UINT8_T with saturating
// instructions (open-mpi/ompi#8045), where torch wraps.
//
// # Timeouts and failures
//
// MPI cannot cancel a collective. A Work still running after the group
// timeout (or whose ctx ends) fails with pg.ErrTimeout, in a
// *pg.CollectiveError naming the op and its sequence number; every other
// Work in flight in the process fails with pg.ErrAborted, and after
// Options.AbortGrace (1s) the MPI goroutine calls MPI_Abort on the
// group's communicator, as c10d's ProcessGroupMPI does. Open MPI's
// MPI_Abort ends the whole job: mpirun kills every rank (those waiting in
// the same collective and the rest) and exits with a non-zero status.
// A job meant to survive a lost rank must use pg/tcp with an elastic
// agent instead.
//
// Abort and Close fail this rank's Works at once (pg.ErrAborted,
// pg.ErrClosed) but leave their MPI requests to finish in the background
// (Works still queued are posted all the same, so that MPI's matching
// stays in step with the ranks that issue their half); later calls are
// refused;
// the other ranks' matching collectives then run into their own timeout,
// which aborts the job. A process that exits with requests still open
// does not call MPI_Finalize, and mpirun ends the job. Close of the last
// group calls MPI_Finalize, which waits for every rank to finalise (up to
// the group timeout).
//
// Send and Recv of different sizes: a Recv whose tensor is shorter or
// longer than the message fails with pg.ErrInvalidArgument
// (MPI_ERR_TRUNCATE, or the received count); the Send completes, since MPI
// does not tell the sender. This is the one departure from the
// pg.PointToPoint contract.
//
// CUDA-aware MPI is out of scope.
package mpi
