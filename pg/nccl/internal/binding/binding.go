package binding

import (
	"context"
	"time"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
)

// Backend is what a Group needs of NCCL and CUDA for one communicator:
// device and pinned memory, its one stream, the collectives enqueued on
// that stream, and the communicator's life cycle. Every method but
// AsyncError and Abort is called with the group's issue lock held;
// AsyncError and Abort may be called from the watchdog at any time.
type Backend interface {
	Malloc(n int) (libnccl.DevicePtr, error)
	Free(p libnccl.DevicePtr) error
	MallocHost(n int) ([]byte, error)
	FreeHost(b []byte) error

	// On the group's stream, asynchronous.
	H2D(dst libnccl.DevicePtr, src []byte) error
	D2H(dst []byte, src libnccl.DevicePtr) error
	D2D(dst, src libnccl.DevicePtr, n int) error
	Record() (Event, error)
	// RecordTiming is Record with a timing event (cuEventCreate without
	// CU_EVENT_DISABLE_TIMING), which Elapsed can measure from.
	RecordTiming() (Event, error)
	// Synchronize waits for the stream, at most until ctx ends.
	Synchronize(ctx context.Context) error

	AllReduce(send, recv libnccl.DevicePtr, count int, dt libnccl.DataType, op libnccl.RedOp) error
	Reduce(send, recv libnccl.DevicePtr, count int, dt libnccl.DataType, op libnccl.RedOp, root int) error
	Broadcast(send, recv libnccl.DevicePtr, count int, dt libnccl.DataType, root int) error
	AllGather(send, recv libnccl.DevicePtr, sendCount int, dt libnccl.DataType) error
	ReduceScatter(send, recv libnccl.DevicePtr, recvCount int, dt libnccl.DataType, op libnccl.RedOp) error
	Send(buf libnccl.DevicePtr, count int, dt libnccl.DataType, peer int) error
	Recv(buf libnccl.DevicePtr, count int, dt libnccl.DataType, peer int) error
	// Group runs f between ncclGroupStart and ncclGroupEnd.
	Group(f func() error) error
	PreMulSum(factor float64, dt libnccl.DataType) (libnccl.RedOp, error)
	DestroyOp(op libnccl.RedOp) error
	HasAvg() bool

	AsyncError() (libnccl.Result, error)
	// LastError is NCCL's last error message for the communicator.
	LastError() string
	Abort() error
	Split(ctx context.Context, color, key int) (Backend, error)
	// UniqueID makes an NCCL unique id (ncclGetUniqueId).
	UniqueID() (libnccl.UniqueID, error)
	// Pair makes a two-rank communicator on this backend's device, with
	// a stream of its own, in which this rank is rank (0 or 1).
	Pair(ctx context.Context, id libnccl.UniqueID, rank int) (Backend, error)
	// RankSize is the communicator's rank and size.
	RankSize() (rank, size int, err error)

	// Device buckets. Caps says what the library has.
	Caps() Caps
	MemAlloc(n int) (libnccl.DevicePtr, error) // ncclMemAlloc
	MemFree(p libnccl.DevicePtr) error
	Register(p libnccl.DevicePtr, n int) (uintptr, error) // ncclCommRegister
	Deregister(h uintptr) error
	WindowRegister(p libnccl.DevicePtr, n int) (uintptr, error) // collective; NCCL_WIN_COLL_SYMMETRIC
	WindowDeregister(h uintptr) error
	NewCopyStream() (CopyStream, error)
	// WaitEvent makes the group's stream wait for e (cuStreamWaitEvent).
	WaitEvent(e Event) error

	// Close destroys the communicator (or, after Abort, only the
	// stream); ctx bounds the wait for pending work.
	Close(ctx context.Context) error
}

// Event marks a point on a stream.
type Event interface {
	// Query is nil once the stream has passed the point, libnccl.ErrNotReady
	// before, or the error of the work before it.
	Query() error
	// Elapsed is the device time from start to this event, both timing
	// events (RecordTiming) that have passed: cuEventElapsedTime.
	Elapsed(start Event) (time.Duration, error)
	Destroy() error
}

// CopyStream is a second stream for uploads and downloads, so that they
// overlap the collectives on the group's stream.
type CopyStream interface {
	H2D(dst libnccl.DevicePtr, src []byte) error
	D2H(dst []byte, src libnccl.DevicePtr) error
	D2D(dst, src libnccl.DevicePtr, n int) error
	Record() (Event, error)
	Synchronize(ctx context.Context) error
	Destroy() error
}

// Caps is what the loaded library offers for registering device
// buckets: its version and which of the optional symbols it has.
type Caps struct {
	Version                    libnccl.Version
	MemAlloc, Register, Window bool
}

// DataType maps a pg.Dtype to NCCL's; it is -1 for a dtype NCCL lacks.
func DataType(d pg.Dtype) libnccl.DataType {
	switch d {
	case pg.Float32:
		return libnccl.Float32
	case pg.Float64:
		return libnccl.Float64
	case pg.Float16:
		return libnccl.Float16
	case pg.BFloat16:
		return libnccl.BFloat16
	case pg.Int32:
		return libnccl.Int32
	case pg.Int64:
		return libnccl.Int64
	case pg.Uint8:
		return libnccl.Uint8
	}
	return -1
}
