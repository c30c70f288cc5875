package nccl

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/nccl"
)

// backend is what a Group needs of NCCL and CUDA for one communicator:
// device and pinned memory, its one stream, the collectives enqueued on
// that stream, and the communicator's life cycle. The real one is
// cudaBackend; the tests run the group against a fake. Every method but
// asyncError and abort is called with the group's issue lock held;
// asyncError and abort may be called from the watchdog at any time.
type backend interface {
	malloc(n int) (nccl.DevicePtr, error)
	free(p nccl.DevicePtr) error
	mallocHost(n int) ([]byte, error)
	freeHost(b []byte) error

	// On the group's stream, asynchronous.
	h2d(dst nccl.DevicePtr, src []byte) error
	d2h(dst []byte, src nccl.DevicePtr) error
	d2d(dst, src nccl.DevicePtr, n int) error
	record() (event, error)
	// synchronize waits for the stream, at most until ctx ends.
	synchronize(ctx context.Context) error

	allReduce(send, recv nccl.DevicePtr, count int, dt nccl.DataType, op nccl.RedOp) error
	reduce(send, recv nccl.DevicePtr, count int, dt nccl.DataType, op nccl.RedOp, root int) error
	broadcast(send, recv nccl.DevicePtr, count int, dt nccl.DataType, root int) error
	allGather(send, recv nccl.DevicePtr, sendCount int, dt nccl.DataType) error
	reduceScatter(send, recv nccl.DevicePtr, recvCount int, dt nccl.DataType, op nccl.RedOp) error
	send(buf nccl.DevicePtr, count int, dt nccl.DataType, peer int) error
	recv(buf nccl.DevicePtr, count int, dt nccl.DataType, peer int) error
	// group runs f between ncclGroupStart and ncclGroupEnd.
	group(f func() error) error
	preMulSum(factor float64, dt nccl.DataType) (nccl.RedOp, error)
	destroyOp(op nccl.RedOp) error
	hasAvg() bool

	asyncError() (nccl.Result, error)
	// lastError is NCCL's last error message for the communicator.
	lastError() string
	abort() error
	split(ctx context.Context, color, key int) (backend, error)
	// uniqueID makes an NCCL unique id (ncclGetUniqueId).
	uniqueID() (nccl.UniqueID, error)
	// pair makes a two-rank communicator on this backend's device, with
	// a stream of its own, in which this rank is rank (0 or 1).
	pair(ctx context.Context, id nccl.UniqueID, rank int) (backend, error)
	// rankSize is the communicator's rank and size.
	rankSize() (rank, size int, err error)
	// Device buckets (devbucket.go). regCaps says what the library has.
	regCaps() regCaps
	memAlloc(n int) (nccl.DevicePtr, error) // ncclMemAlloc
	memFree(p nccl.DevicePtr) error
	register(p nccl.DevicePtr, n int) (uintptr, error) // ncclCommRegister
	deregister(h uintptr) error
	windowRegister(p nccl.DevicePtr, n int) (uintptr, error) // collective; NCCL_WIN_COLL_SYMMETRIC
	windowDeregister(h uintptr) error
	newCopyStream() (copyStream, error)
	// waitEvent makes the group's stream wait for e (cuStreamWaitEvent).
	waitEvent(e event) error

	// close destroys the communicator (or, after abort, only the
	// stream); ctx bounds the wait for pending work.
	close(ctx context.Context) error
}

// event marks a point on the stream.
type event interface {
	// query is nil once the stream has passed the point, nccl.ErrNotReady
	// before, or the error of the work before it.
	query() error
	destroy() error
}

// cudaBackend is the backend on a real GPU.
type cudaBackend struct {
	comm      *nccl.Comm
	dev       *nccl.Device
	stream    *nccl.Stream
	ownDevice bool // release the device's primary context on close (not for split children)
}

func newCUDABackend(comm *nccl.Comm) (*cudaBackend, error) {
	s, err := comm.Device().NewStream()
	if err != nil {
		return nil, err
	}
	return &cudaBackend{comm: comm, dev: comm.Device(), stream: s}, nil
}

func (b *cudaBackend) malloc(n int) (nccl.DevicePtr, error) { return b.dev.Malloc(n) }
func (b *cudaBackend) free(p nccl.DevicePtr) error          { return b.dev.Free(p) }
func (b *cudaBackend) mallocHost(n int) ([]byte, error)     { return b.dev.MallocHost(n) }
func (b *cudaBackend) freeHost(p []byte) error              { return b.dev.FreeHost(p) }
func (b *cudaBackend) h2d(dst nccl.DevicePtr, src []byte) error {
	return b.stream.CopyHtoD(dst, src)
}
func (b *cudaBackend) d2h(dst []byte, src nccl.DevicePtr) error {
	return b.stream.CopyDtoH(dst, src)
}
func (b *cudaBackend) d2d(dst, src nccl.DevicePtr, n int) error {
	return b.stream.CopyDtoD(dst, src, n)
}

func (b *cudaBackend) record() (event, error) {
	e, err := b.dev.NewEvent(false)
	if err != nil {
		return nil, err
	}
	if err := e.Record(b.stream); err != nil {
		_ = e.Destroy()
		return nil, err
	}
	return cudaEvent{e}, nil
}

type cudaEvent struct{ e *nccl.Event }

func (e cudaEvent) query() error   { return e.e.Query() }
func (e cudaEvent) destroy() error { return e.e.Destroy() }

func (b *cudaBackend) synchronize(ctx context.Context) error {
	ev, err := b.record()
	if err != nil {
		return err
	}
	defer ev.destroy()
	return pollEvent(ctx, ev)
}

func (b *cudaBackend) allReduce(send, recv nccl.DevicePtr, count int, dt nccl.DataType, op nccl.RedOp) error {
	return b.comm.AllReduce(send, recv, count, dt, op, b.stream)
}
func (b *cudaBackend) reduce(send, recv nccl.DevicePtr, count int, dt nccl.DataType, op nccl.RedOp, root int) error {
	return b.comm.Reduce(send, recv, count, dt, op, root, b.stream)
}
func (b *cudaBackend) broadcast(send, recv nccl.DevicePtr, count int, dt nccl.DataType, root int) error {
	return b.comm.Broadcast(send, recv, count, dt, root, b.stream)
}
func (b *cudaBackend) allGather(send, recv nccl.DevicePtr, sendCount int, dt nccl.DataType) error {
	return b.comm.AllGather(send, recv, sendCount, dt, b.stream)
}
func (b *cudaBackend) reduceScatter(send, recv nccl.DevicePtr, recvCount int, dt nccl.DataType, op nccl.RedOp) error {
	return b.comm.ReduceScatter(send, recv, recvCount, dt, op, b.stream)
}
func (b *cudaBackend) send(buf nccl.DevicePtr, count int, dt nccl.DataType, peer int) error {
	return b.comm.Send(buf, count, dt, peer, b.stream)
}
func (b *cudaBackend) recv(buf nccl.DevicePtr, count int, dt nccl.DataType, peer int) error {
	return b.comm.Recv(buf, count, dt, peer, b.stream)
}
func (b *cudaBackend) group(f func() error) error { return b.comm.Group(f) }
func (b *cudaBackend) preMulSum(factor float64, dt nccl.DataType) (nccl.RedOp, error) {
	return b.comm.CreatePreMulSum(factor, dt)
}
func (b *cudaBackend) destroyOp(op nccl.RedOp) error    { return b.comm.DestroyRedOp(op) }
func (b *cudaBackend) hasAvg() bool                     { return b.comm.Library().HasAvg() }
func (b *cudaBackend) asyncError() (nccl.Result, error) { return b.comm.AsyncError() }
func (b *cudaBackend) lastError() string                { return b.comm.LastError() }
func (b *cudaBackend) abort() error                     { return b.comm.Abort() }

func (b *cudaBackend) split(ctx context.Context, color, key int) (backend, error) {
	c, err := b.comm.Split(ctx, color, key)
	if err != nil || c == nil {
		return nil, err
	}
	nb, err := newCUDABackend(c)
	if err != nil {
		_ = c.Abort()
		return nil, err
	}
	return nb, nil
}

func (b *cudaBackend) uniqueID() (nccl.UniqueID, error) { return b.comm.Library().UniqueID() }

func (b *cudaBackend) pair(ctx context.Context, id nccl.UniqueID, rank int) (backend, error) {
	c, err := b.comm.Library().CommInitRank(ctx, b.dev, 2, id, rank)
	if err != nil {
		return nil, err
	}
	nb, err := newCUDABackend(c)
	if err != nil {
		_ = c.Abort()
		return nil, err
	}
	return nb, nil
}

func (b *cudaBackend) rankSize() (int, int, error) {
	r, err := b.comm.UserRank()
	if err != nil {
		return 0, 0, err
	}
	n, err := b.comm.Count()
	return r, n, err
}

func (b *cudaBackend) close(ctx context.Context) error {
	err := b.comm.Destroy(ctx) // a no-op after Abort
	if serr := b.synchronize(ctx); serr != nil && err == nil {
		err = fmt.Errorf("waiting for the stream: %w", serr)
	}
	if derr := b.stream.Destroy(); derr != nil && err == nil {
		err = derr
	}
	if b.ownDevice {
		_ = b.dev.Close()
	}
	return err
}

func (b *cudaBackend) regCaps() regCaps {
	l := b.comm.Library()
	return regCaps{version: l.Version(), memAlloc: l.HasMemAlloc(), register: l.HasRegister(), window: l.HasWindows()}
}
func (b *cudaBackend) memAlloc(n int) (nccl.DevicePtr, error) {
	return b.comm.Library().MemAlloc(b.dev, n)
}
func (b *cudaBackend) memFree(p nccl.DevicePtr) error { return b.comm.Library().MemFree(b.dev, p) }
func (b *cudaBackend) register(p nccl.DevicePtr, n int) (uintptr, error) {
	r, err := b.comm.Register(p, n)
	return uintptr(r), err
}
func (b *cudaBackend) deregister(h uintptr) error { return b.comm.Deregister(nccl.Registration(h)) }
func (b *cudaBackend) windowRegister(p nccl.DevicePtr, n int) (uintptr, error) {
	w, err := b.comm.WindowRegister(p, n, nccl.WinCollSymmetric)
	return uintptr(w), err
}
func (b *cudaBackend) windowDeregister(h uintptr) error {
	return b.comm.WindowDeregister(nccl.Window(h))
}

func (b *cudaBackend) waitEvent(e event) error {
	ce, ok := e.(cudaEvent)
	if !ok {
		return fmt.Errorf("nccl: waitEvent on a foreign event %T", e)
	}
	return b.stream.WaitEvent(ce.e)
}

func (b *cudaBackend) newCopyStream() (copyStream, error) {
	s, err := b.dev.NewStream()
	if err != nil {
		return nil, err
	}
	return &cudaCopyStream{dev: b.dev, s: s}, nil
}

// cudaCopyStream is a CUDA stream for device-bucket copies.
type cudaCopyStream struct {
	dev *nccl.Device
	s   *nccl.Stream
}

func (c *cudaCopyStream) h2d(dst nccl.DevicePtr, src []byte) error { return c.s.CopyHtoD(dst, src) }
func (c *cudaCopyStream) d2h(dst []byte, src nccl.DevicePtr) error { return c.s.CopyDtoH(dst, src) }
func (c *cudaCopyStream) d2d(dst, src nccl.DevicePtr, n int) error { return c.s.CopyDtoD(dst, src, n) }
func (c *cudaCopyStream) record() (event, error) {
	e, err := c.dev.NewEvent(false)
	if err != nil {
		return nil, err
	}
	if err := e.Record(c.s); err != nil {
		_ = e.Destroy()
		return nil, err
	}
	return cudaEvent{e}, nil
}
func (c *cudaCopyStream) synchronize(ctx context.Context) error {
	ev, err := c.record()
	if err != nil {
		return err
	}
	defer ev.destroy()
	return pollEvent(ctx, ev)
}
func (c *cudaCopyStream) destroy() error { return c.s.Destroy() }
