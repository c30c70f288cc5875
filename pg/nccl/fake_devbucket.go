package nccl

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goddp/ddp/nccl"
)

// The fake's model of device buckets: ncclMemAlloc and cuMemAlloc hand
// out fake device memory; registrations and windows are handles kept in
// a table until released (a window registration is collective, so it is
// a barrier of the world, as in NCCL); the copy stream is a second
// fakeStream; waitEvent blocks the group's stream until the event's
// point on the copy stream has run. trace records, in the order they
// ran, the calls tests check the order of.
type fakeDevice struct {
	caps                                   regCaps
	failMemAlloc, failWindow, failRegister atomic.Bool
	memAllocs, windows, registrations      atomic.Int64 // made, ever

	mu      sync.Mutex
	regs    map[uintptr]string // live handle -> "window" or "register"
	next    uintptr
	log     []string
	copies  []*fakeCopyStream
	holding chan struct{} // non-nil while holdCopies blocks the copy streams
}

func (d *fakeDevice) trace(s string) {
	d.mu.Lock()
	d.log = append(d.log, s)
	d.mu.Unlock()
}

// traced is the calls traced so far.
func (d *fakeDevice) traced() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.log)
}

// live is the registrations and windows not yet released.
func (d *fakeDevice) live() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.regs)
}

// holdCopies stops the copy streams at their current point until the
// returned function is called.
func (d *fakeDevice) holdCopies() (release func()) {
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

func (b *fakeBackend) regCaps() regCaps { return b.dev.caps }

func (b *fakeBackend) memAlloc(n int) (nccl.DevicePtr, error) {
	if !b.dev.caps.memAlloc {
		return 0, fmt.Errorf("fake: ncclMemAlloc: %w", nccl.ErrUnsupported)
	}
	if b.dev.failMemAlloc.Load() {
		return 0, &nccl.Error{Func: "ncclMemAlloc", Code: nccl.UnhandledCudaError, Desc: "fake: out of memory"}
	}
	b.dev.memAllocs.Add(1)
	b.dev.trace("memAlloc")
	return b.mem.alloc(n), nil
}

func (b *fakeBackend) memFree(p nccl.DevicePtr) error {
	b.dev.trace("memFree")
	return b.free(p)
}

func (b *fakeBackend) handle(kind string) uintptr {
	b.dev.mu.Lock()
	defer b.dev.mu.Unlock()
	b.dev.next++
	b.dev.regs[b.dev.next] = kind
	b.dev.log = append(b.dev.log, kind)
	return b.dev.next
}

func (b *fakeBackend) unhandle(h uintptr, kind string) error {
	b.dev.mu.Lock()
	defer b.dev.mu.Unlock()
	if b.dev.regs[h] != kind {
		return &nccl.Error{Func: "fake", Code: nccl.InvalidArgument, Desc: fmt.Sprintf("%s of handle %d, which is %q", kind, h, b.dev.regs[h])}
	}
	delete(b.dev.regs, h)
	b.dev.log = append(b.dev.log, "de"+kind)
	return nil
}

func (b *fakeBackend) register(p nccl.DevicePtr, n int) (uintptr, error) {
	if !b.dev.caps.register {
		return 0, fmt.Errorf("fake: ncclCommRegister: %w", nccl.ErrUnsupported)
	}
	if b.dev.failRegister.Load() {
		return 0, &nccl.Error{Func: "ncclCommRegister", Code: nccl.InternalError, Desc: "fake: registration refused"}
	}
	b.dev.registrations.Add(1)
	return b.handle("register"), nil
}

func (b *fakeBackend) deregister(h uintptr) error { return b.unhandle(h, "register") }

// windowRegister is collective, as ncclCommWindowRegister: a barrier of
// the world, so that ranks registering different buckets hang (and the
// group times out) as they would on NCCL.
func (b *fakeBackend) windowRegister(p nccl.DevicePtr, n int) (uintptr, error) {
	if !b.dev.caps.window {
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

func (b *fakeBackend) windowDeregister(h uintptr) error { return b.unhandle(h, "window") }

func (b *fakeBackend) waitEvent(e event) error {
	fe, ok := e.(fakeEvent)
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

func (b *fakeBackend) newCopyStream() (copyStream, error) {
	c := &fakeCopyStream{be: b, st: newFakeStream()}
	b.dev.mu.Lock()
	b.dev.copies = append(b.dev.copies, c)
	if b.dev.holding != nil {
		gate := b.dev.holding
		c.st.enqueue(func() { <-gate })
	}
	b.dev.mu.Unlock()
	return c, nil
}

// fakeCopyStream is the copy stream: a fakeStream over the backend's
// fake device memory.
type fakeCopyStream struct {
	be *fakeBackend
	st *fakeStream
}

func (c *fakeCopyStream) h2d(dst nccl.DevicePtr, src []byte) error {
	d := c.be.mem.at(dst, len(src))
	c.st.enqueue(func() { c.be.dev.trace("h2d"); copy(d, src) })
	return nil
}
func (c *fakeCopyStream) d2h(dst []byte, src nccl.DevicePtr) error {
	s := c.be.mem.at(src, len(dst))
	c.st.enqueue(func() { c.be.dev.trace("d2h"); copy(dst, s) })
	return nil
}
func (c *fakeCopyStream) d2d(dst, src nccl.DevicePtr, n int) error {
	d, s := c.be.mem.at(dst, n), c.be.mem.at(src, n)
	c.st.enqueue(func() { c.be.dev.trace("d2d"); copy(d, s) })
	return nil
}
func (c *fakeCopyStream) record() (event, error) {
	e := fakeEvent{done: make(chan struct{})}
	c.st.enqueue(func() { c.be.dev.trace("event"); close(e.done) })
	return e, nil
}
func (c *fakeCopyStream) synchronize(ctx context.Context) error {
	e := fakeEvent{done: make(chan struct{})}
	c.st.enqueue(func() { close(e.done) })
	return pollEvent(ctx, e)
}
func (c *fakeCopyStream) destroy() error {
	close(c.st.stop)
	<-c.st.done
	return nil
}
