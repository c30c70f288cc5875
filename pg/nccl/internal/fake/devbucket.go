package fake

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goddp/ddp/nccl"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// The fake's model of device buckets: ncclMemAlloc and cuMemAlloc hand
// out fake device memory; registrations and windows are handles kept in
// a table until released (a window registration is collective, so it is
// a barrier of the world, as in NCCL); the copy stream is a second
// stream; waitEvent blocks the group's stream until the event's
// point on the copy stream has run. trace records, in the order they
// ran, the calls tests check the order of.
type device struct {
	caps                                   binding.Caps
	failMemAlloc, failWindow, failRegister atomic.Bool
	memAllocs, windows, registrations      atomic.Int64 // made, ever

	mu      sync.Mutex
	regs    map[uintptr]string // live handle -> "window" or "register"
	next    uintptr
	log     []string
	copies  []*copyStream
	holding chan struct{} // non-nil while holdCopies blocks the copy streams
}

func (d *device) trace(s string) {
	d.mu.Lock()
	d.log = append(d.log, s)
	d.mu.Unlock()
}

// traced is the calls traced so far.
func (d *device) traced() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.log)
}

// live is the registrations and windows not yet released.
func (d *device) live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.regs)
}

// holdCopies stops the copy streams at their current point until the
// returned function is called.
func (d *device) holdCopies() (release func()) {
	gate := make(chan struct{})
	d.mu.Lock()
	for _, c := range d.copies {
		c.st.enqueue(func() { <-gate })
	}
	d.holding = gate
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		d.holding = nil
		d.mu.Unlock()
		close(gate)
	}
}

func (b *Backend) Caps() binding.Caps { return b.dev.caps }

func (b *Backend) MemAlloc(n int) (nccl.DevicePtr, error) {
	if !b.dev.caps.MemAlloc {
		return 0, fmt.Errorf("fake: ncclMemAlloc: %w", nccl.ErrUnsupported)
	}
	if b.dev.failMemAlloc.Load() {
		return 0, &nccl.Error{Func: "ncclMemAlloc", Code: nccl.UnhandledCudaError, Desc: "fake: out of memory"}
	}
	b.dev.memAllocs.Add(1)
	b.dev.trace("memAlloc")
	return b.mem.alloc(n), nil
}

func (b *Backend) MemFree(p nccl.DevicePtr) error {
	b.dev.trace("memFree")
	return b.Free(p)
}

func (b *Backend) handle(kind string) uintptr {
	b.dev.mu.Lock()
	defer b.dev.mu.Unlock()
	b.dev.next++
	b.dev.regs[b.dev.next] = kind
	b.dev.log = append(b.dev.log, kind)
	return b.dev.next
}

func (b *Backend) unhandle(h uintptr, kind string) error {
	b.dev.mu.Lock()
	defer b.dev.mu.Unlock()
	if b.dev.regs[h] != kind {
		return &nccl.Error{Func: "fake", Code: nccl.InvalidArgument,
			Desc: fmt.Sprintf("%s of handle %d, which is %q", kind, h, b.dev.regs[h])}
	}
	delete(b.dev.regs, h)
	b.dev.log = append(b.dev.log, "de"+kind)
	return nil
}

func (b *Backend) Register(p nccl.DevicePtr, n int) (uintptr, error) {
	if !b.dev.caps.Register {
		return 0, fmt.Errorf("fake: ncclCommRegister: %w", nccl.ErrUnsupported)
	}
	if b.dev.failRegister.Load() {
		return 0, &nccl.Error{Func: "ncclCommRegister", Code: nccl.InternalError, Desc: "fake: registration refused"}
	}
	b.dev.registrations.Add(1)
	return b.handle("register"), nil
}

func (b *Backend) Deregister(h uintptr) error { return b.unhandle(h, "register") }

// windowRegister is collective, as ncclCommWindowRegister: a barrier of
// the world, so that ranks registering different buckets hang (and the
// group times out) as they would on NCCL.
func (b *Backend) WindowRegister(p nccl.DevicePtr, n int) (uintptr, error) {
	if !b.dev.caps.Window {
		return 0, fmt.Errorf("fake: ncclCommWindowRegister: %w", nccl.ErrUnsupported)
	}
	if b.dev.failWindow.Load() {
		return 0, &nccl.Error{Func: "ncclCommWindowRegister", Code: nccl.InvalidUsage, Desc: "fake: window refused"}
	}
	if err := b.lg.Barrier(context.Background()).Wait(context.Background()); err != nil {
		return 0, &nccl.Error{Func: "ncclCommWindowRegister", Code: nccl.RemoteError, Desc: err.Error()}
	}
	b.dev.windows.Add(1)
	return b.handle("window"), nil
}

func (b *Backend) WindowDeregister(h uintptr) error { return b.unhandle(h, "window") }

func (b *Backend) WaitEvent(e binding.Event) error {
	fe, ok := e.(event)
	if !ok {
		return fmt.Errorf("fake: waitEvent on %T", e)
	}
	b.st.enqueue(func() {
		b.dev.trace("wait")
		select {
		case <-fe.done:
		case <-b.abortCh:
		}
		b.dev.trace("waited")
	})
	return nil
}

func (b *Backend) NewCopyStream() (binding.CopyStream, error) {
	c := &copyStream{be: b, st: newStream()}
	b.dev.mu.Lock()
	b.dev.copies = append(b.dev.copies, c)
	if b.dev.holding != nil {
		gate := b.dev.holding
		c.st.enqueue(func() { <-gate })
	}
	b.dev.mu.Unlock()
	return c, nil
}

// copyStream is the copy stream: a stream over the backend's
// fake device memory.
type copyStream struct {
	be *Backend
	st *stream
}

func (c *copyStream) H2D(dst nccl.DevicePtr, src []byte) error {
	d := c.be.mem.at(dst, len(src))
	c.st.enqueue(func() { c.be.dev.trace("h2d"); copy(d, src) })
	return nil
}
func (c *copyStream) D2H(dst []byte, src nccl.DevicePtr) error {
	s := c.be.mem.at(src, len(dst))
	c.st.enqueue(func() { c.be.dev.trace("d2h"); copy(dst, s) })
	return nil
}
func (c *copyStream) D2D(dst, src nccl.DevicePtr, n int) error {
	d, s := c.be.mem.at(dst, n), c.be.mem.at(src, n)
	c.st.enqueue(func() { c.be.dev.trace("d2d"); copy(d, s) })
	return nil
}
func (c *copyStream) Record() (binding.Event, error) {
	e := event{done: make(chan struct{})}
	c.st.enqueue(func() { c.be.dev.trace("event"); close(e.done) })
	return e, nil
}
func (c *copyStream) Synchronize(ctx context.Context) error {
	e := event{done: make(chan struct{})}
	c.st.enqueue(func() { close(e.done) })
	return e.wait(ctx)
}
func (c *copyStream) Destroy() error {
	close(c.st.stop)
	<-c.st.done
	return nil
}
