package nccl

import (
	"context"
	"fmt"
	"time"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// cudaBackend is the binding.Backend on a real GPU.
type cudaBackend struct {
	comm      *libnccl.Comm
	dev       *libnccl.Device
	stream    *libnccl.Stream
	ownDevice bool // release the device's primary context on close (not for split children)
}

func newCUDABackend(comm *libnccl.Comm) (*cudaBackend, error) {
	s, err := comm.Device().NewStream()
	if err != nil {
		return nil, err
	}
	return &cudaBackend{comm: comm, dev: comm.Device(), stream: s}, nil
}

func (b *cudaBackend) Malloc(n int) (libnccl.DevicePtr, error) { return b.dev.Malloc(n) }
func (b *cudaBackend) Free(p libnccl.DevicePtr) error          { return b.dev.Free(p) }
func (b *cudaBackend) MallocHost(n int) ([]byte, error)        { return b.dev.MallocHost(n) }
func (b *cudaBackend) FreeHost(p []byte) error                 { return b.dev.FreeHost(p) }
func (b *cudaBackend) H2D(dst libnccl.DevicePtr, src []byte) error {
	return b.stream.CopyHtoD(dst, src)
}
func (b *cudaBackend) D2H(dst []byte, src libnccl.DevicePtr) error {
	return b.stream.CopyDtoH(dst, src)
}
func (b *cudaBackend) D2D(dst, src libnccl.DevicePtr, n int) error {
	return b.stream.CopyDtoD(dst, src, n)
}

func (b *cudaBackend) Record() (binding.Event, error) { return b.record(false) }

func (b *cudaBackend) RecordTiming() (binding.Event, error) { return b.record(true) }

func (b *cudaBackend) record(timing bool) (binding.Event, error) {
	e, err := b.dev.NewEvent(timing)
	if err != nil {
		return nil, err
	}
	if err := e.Record(b.stream); err != nil {
		_ = e.Destroy()
		return nil, err
	}
	return cudaEvent{e}, nil
}

type cudaEvent struct{ e *libnccl.Event }

func (e cudaEvent) Query() error   { return e.e.Query() }
func (e cudaEvent) Destroy() error { return e.e.Destroy() }

// Elapsed is cuEventElapsedTime(start, e).
func (e cudaEvent) Elapsed(start binding.Event) (time.Duration, error) {
	s, ok := start.(cudaEvent)
	if !ok {
		return 0, fmt.Errorf("nccl: elapsed time from a foreign event %T", start)
	}
	ms, err := e.e.Elapsed(s.e)
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

func (b *cudaBackend) Synchronize(ctx context.Context) error {
	ev, err := b.Record()
	if err != nil {
		return err
	}
	defer ev.Destroy()
	return pollEvent(ctx, ev)
}

func (b *cudaBackend) AllReduce(send, recv libnccl.DevicePtr, count int, dt libnccl.DataType, op libnccl.RedOp) error {
	return b.comm.AllReduce(send, recv, count, dt, op, b.stream)
}
func (b *cudaBackend) Reduce(
	send, recv libnccl.DevicePtr, count int, dt libnccl.DataType, op libnccl.RedOp, root int,
) error {
	return b.comm.Reduce(send, recv, count, dt, op, root, b.stream)
}
func (b *cudaBackend) Broadcast(send, recv libnccl.DevicePtr, count int, dt libnccl.DataType, root int) error {
	return b.comm.Broadcast(send, recv, count, dt, root, b.stream)
}
func (b *cudaBackend) AllGather(send, recv libnccl.DevicePtr, sendCount int, dt libnccl.DataType) error {
	return b.comm.AllGather(send, recv, sendCount, dt, b.stream)
}
func (b *cudaBackend) ReduceScatter(
	send, recv libnccl.DevicePtr, recvCount int, dt libnccl.DataType, op libnccl.RedOp,
) error {
	return b.comm.ReduceScatter(send, recv, recvCount, dt, op, b.stream)
}
func (b *cudaBackend) Send(buf libnccl.DevicePtr, count int, dt libnccl.DataType, peer int) error {
	return b.comm.Send(buf, count, dt, peer, b.stream)
}
func (b *cudaBackend) Recv(buf libnccl.DevicePtr, count int, dt libnccl.DataType, peer int) error {
	return b.comm.Recv(buf, count, dt, peer, b.stream)
}
func (b *cudaBackend) Group(f func() error) error { return b.comm.Group(f) }
func (b *cudaBackend) PreMulSum(factor float64, dt libnccl.DataType) (libnccl.RedOp, error) {
	return b.comm.CreatePreMulSum(factor, dt)
}
func (b *cudaBackend) DestroyOp(op libnccl.RedOp) error    { return b.comm.DestroyRedOp(op) }
func (b *cudaBackend) HasAvg() bool                        { return b.comm.Library().HasAvg() }
func (b *cudaBackend) AsyncError() (libnccl.Result, error) { return b.comm.AsyncError() }
func (b *cudaBackend) LastError() string                   { return b.comm.LastError() }
func (b *cudaBackend) Abort() error                        { return b.comm.Abort() }

func (b *cudaBackend) Split(ctx context.Context, color, key int) (binding.Backend, error) {
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

func (b *cudaBackend) UniqueID() (libnccl.UniqueID, error) { return b.comm.Library().UniqueID() }

func (b *cudaBackend) Pair(ctx context.Context, id libnccl.UniqueID, rank int) (binding.Backend, error) {
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

func (b *cudaBackend) RankSize() (int, int, error) {
	r, err := b.comm.UserRank()
	if err != nil {
		return 0, 0, err
	}
	n, err := b.comm.Count()
	return r, n, err
}

func (b *cudaBackend) Close(ctx context.Context) error {
	err := b.comm.Destroy(ctx) // a no-op after Abort
	if serr := b.Synchronize(ctx); serr != nil && err == nil {
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

func (b *cudaBackend) Caps() binding.Caps {
	l := b.comm.Library()
	return binding.Caps{Version: l.Version(), MemAlloc: l.HasMemAlloc(), Register: l.HasRegister(), Window: l.HasWindows()}
}
func (b *cudaBackend) MemAlloc(n int) (libnccl.DevicePtr, error) {
	return b.comm.Library().MemAlloc(b.dev, n)
}
func (b *cudaBackend) MemFree(p libnccl.DevicePtr) error { return b.comm.Library().MemFree(b.dev, p) }
func (b *cudaBackend) Register(p libnccl.DevicePtr, n int) (uintptr, error) {
	r, err := b.comm.Register(p, n)
	return uintptr(r), err
}
func (b *cudaBackend) Deregister(h uintptr) error { return b.comm.Deregister(libnccl.Registration(h)) }
func (b *cudaBackend) WindowRegister(p libnccl.DevicePtr, n int) (uintptr, error) {
	w, err := b.comm.WindowRegister(p, n, libnccl.WinCollSymmetric)
	return uintptr(w), err
}
func (b *cudaBackend) WindowDeregister(h uintptr) error {
	return b.comm.WindowDeregister(libnccl.Window(h))
}

func (b *cudaBackend) WaitEvent(e binding.Event) error {
	ce, ok := e.(cudaEvent)
	if !ok {
		return fmt.Errorf("nccl: waitEvent on a foreign event %T", e)
	}
	return b.stream.WaitEvent(ce.e)
}

func (b *cudaBackend) NewCopyStream() (binding.CopyStream, error) {
	s, err := b.dev.NewStream()
	if err != nil {
		return nil, err
	}
	return &cudaCopyStream{dev: b.dev, s: s}, nil
}

// cudaCopyStream is a CUDA stream for device-bucket copies.
type cudaCopyStream struct {
	dev *libnccl.Device
	s   *libnccl.Stream
}

func (c *cudaCopyStream) H2D(dst libnccl.DevicePtr, src []byte) error { return c.s.CopyHtoD(dst, src) }
func (c *cudaCopyStream) D2H(dst []byte, src libnccl.DevicePtr) error { return c.s.CopyDtoH(dst, src) }
func (c *cudaCopyStream) D2D(dst, src libnccl.DevicePtr, n int) error {
	return c.s.CopyDtoD(dst, src, n)
}
func (c *cudaCopyStream) Record() (binding.Event, error) {
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
func (c *cudaCopyStream) Synchronize(ctx context.Context) error {
	ev, err := c.Record()
	if err != nil {
		return err
	}
	defer ev.Destroy()
	return pollEvent(ctx, ev)
}
func (c *cudaCopyStream) Destroy() error { return c.s.Destroy() }
