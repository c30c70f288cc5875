package nccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// Device buckets (backend.DeviceBucketAllocator): buffers in device memory,
// allocated and registered once, filled through pinned staging memory on
// a copy stream of the group's own, and read by collectives that wait on
// the device for the copy's event. docs/nccl.md, "Device buckets".

// Registration is how device buckets are registered with NCCL.
type Registration int

// The registration policies, best first.
const (
	// RegisterAuto picks the best the loaded library has (the default).
	RegisterAuto Registration = iota
	// RegisterWindow allocates with ncclMemAlloc and registers a
	// symmetric window (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC;
	// NCCL 2.27).
	RegisterWindow
	// RegisterUser registers the buffer with ncclCommRegister (2.19),
	// allocated with ncclMemAlloc where the library has it.
	RegisterUser
	// RegisterNone uses plain cuMemAlloc memory, unregistered.
	RegisterNone
)

func (r Registration) String() string {
	switch r {
	case RegisterAuto:
		return "auto"
	case RegisterWindow:
		return "window"
	case RegisterUser:
		return "register"
	case RegisterNone:
		return "none"
	}
	return fmt.Sprintf("Registration(%d)", int(r))
}

// choosePolicy picks the registration from what the library has and
// what Options asked for, and says why.
func choosePolicy(c binding.Caps, want Registration) (Registration, string) {
	switch want {
	case RegisterNone:
		return RegisterNone, "Options.BucketRegistration asks for plain buffers"
	case RegisterUser:
		if c.Register {
			return RegisterUser, "Options.BucketRegistration asks for ncclCommRegister"
		}
		return RegisterNone, fmt.Sprintf("Options.BucketRegistration asks for ncclCommRegister, which NCCL %v lacks (2.19+)",
			c.Version)
	}
	switch {
	case c.Window && c.MemAlloc:
		return RegisterWindow, fmt.Sprintf("NCCL %v has ncclMemAlloc and ncclCommWindowRegister (2.27+): symmetric windows",
			c.Version)
	case c.Register:
		why := fmt.Sprintf("NCCL %v has no ncclCommWindowRegister", c.Version)
		if c.Version >= 22700 {
			why = fmt.Sprintf("NCCL %v is 2.27+ but lacks the ncclCommWindowRegister/ncclMemAlloc symbols", c.Version)
		}
		return RegisterUser, why + "; using ncclCommRegister (2.19+)"
	}
	return RegisterNone, fmt.Sprintf(
		"NCCL %v has neither ncclCommWindowRegister (2.27+) nor ncclCommRegister (2.19+); plain buffers", c.Version)
}

// devState is a Group's device-bucket state, under its own lock (not the
// issue lock) except sealed, which the issue path reads.
type devState struct {
	mu      sync.Mutex
	policy  Registration // chosen on the first bucket
	why     string
	copy    binding.CopyStream
	buckets []*deviceBucket // open, in allocation order (window deregistration is collective)
	chosen  bool
	sealed  []binding.Event // recorded on the copy stream; the next collective waits on them (issue lock)
}

var _ backend.DeviceBucketAllocator = (*Group)(nil)

// NewDeviceBucket allocates a device bucket of numel elements of d and,
// with register, registers it (backend.DeviceBucketAllocator). The registration policy is
// chosen on the first call from the library's version and symbols and
// logged; a registration that fails falls back to the next (window ->
// ncclCommRegister -> none), logged. Window registration is collective:
// every rank must allocate the same buckets in the same order.
func (g *Group) NewDeviceBucket(ctx context.Context, d pg.Dtype, numel int, register bool) (backend.DeviceBucket,
	error) {
	if numel <= 0 || d.Size() == 0 {
		return nil, fmt.Errorf("%w: device bucket of %d elements of %v", pg.ErrInvalidArgument, numel, d)
	}
	if binding.DataType(d) < 0 {
		return nil, fmt.Errorf("%w: NCCL has no %v", pg.ErrInvalidArgument, d)
	}
	g.mu.Lock()
	defer g.mu.Unlock() // registration is collective: keep it in issue order
	if err := g.failedLocked(); err != nil {
		return nil, err
	}
	s := &g.dev
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.chosen {
		s.policy, s.why = choosePolicy(g.be.Caps(), g.opts.BucketRegistration)
		g.log.Info("nccl: device bucket registration", zap.String("policy", s.policy.String()), zap.String("why", s.why))
		s.chosen = true
	}
	if s.copy == nil {
		cs, err := g.be.NewCopyStream()
		if err != nil {
			return nil, fmt.Errorf("nccl: copy stream for device buckets: %w", err)
		}
		s.copy = cs
	}
	n := numel * d.Size()
	b := &deviceBucket{g: g, dtype: d, numel: numel, bytes: n}
	policy := s.policy
	if !register {
		policy = RegisterNone
	}
	if err := b.allocate(policy); err != nil {
		return nil, err
	}
	pinned, err := g.be.MallocHost(n)
	if err != nil {
		b.release()
		return nil, fmt.Errorf("nccl: pinned staging for a device bucket of %d bytes: %w", n, err)
	}
	b.pinned = pinned
	s.buckets = append(s.buckets, b)
	return b, nil
}

// deviceBucket is one device bucket.
type deviceBucket struct {
	g            *Group
	dtype        pg.Dtype
	numel, bytes int
	ptr          libnccl.DevicePtr
	fromNCCL     bool // ncclMemAlloc, else cuMemAlloc
	reg          Registration
	handle       uintptr // the window or the registration
	pinned       []byte
	staged       [][2]int // byte spans of pinned that enqueued H2D copies may still read: Note [staging in flight]
	closed       bool
}

// allocate gets the memory and registers it, falling back as policy
// allows. Called with the device lock held.
func (b *deviceBucket) allocate(policy Registration) error {
	be, log := b.g.be, b.g.log
	caps := be.Caps()
	var err error
	if (policy == RegisterWindow || policy == RegisterUser) && caps.MemAlloc {
		if b.ptr, err = be.MemAlloc(b.bytes); err == nil {
			b.fromNCCL = true
		} else {
			log.Warn("nccl: ncclMemAlloc failed; using cuMemAlloc", zap.Int("bytes", b.bytes), zap.Error(err))
		}
	}
	if b.ptr == 0 {
		if b.ptr, err = be.Malloc(b.bytes); err != nil {
			return fmt.Errorf("nccl: device bucket of %d bytes: %w", b.bytes, err)
		}
		if policy == RegisterWindow {
			policy = RegisterUser // a symmetric window needs ncclMemAlloc memory
		}
	}
	if policy == RegisterWindow {
		h, err := be.WindowRegister(b.ptr, b.bytes)
		if err == nil {
			b.reg, b.handle = RegisterWindow, h
			return nil
		}
		log.Warn("nccl: ncclCommWindowRegister failed; falling back to ncclCommRegister", zap.Int("bytes", b.bytes),
			zap.Error(err))
		policy = RegisterUser
	}
	if policy == RegisterUser && caps.Register {
		h, err := be.Register(b.ptr, b.bytes)
		if err == nil {
			b.reg, b.handle = RegisterUser, h
			return nil
		}
		log.Warn("nccl: ncclCommRegister failed; using the buffer unregistered", zap.Int("bytes", b.bytes), zap.Error(err))
	}
	b.reg = RegisterNone
	return nil
}

func (b *deviceBucket) Tensor() pg.Tensor {
	return pg.DeviceTensor(b.dtype, b.g.opts.Device, uintptr(b.ptr), b.bytes)
}

func (b *deviceBucket) Registration() string { return b.reg.String() }

func (b *deviceBucket) span(what string, off int, t pg.Tensor) error {
	if b.closed {
		return fmt.Errorf("%w: %s on a closed device bucket", pg.ErrInvalidArgument, what)
	}
	if t.Dtype != b.dtype {
		return fmt.Errorf("%w: %s of a %v tensor into a %v device bucket", pg.ErrInvalidArgument, what, t.Dtype, b.dtype)
	}
	if off < 0 || off+t.Len() > b.numel {
		return fmt.Errorf("%w: %s of elements [%d, %d) of a device bucket of %d", pg.ErrInvalidArgument, what, off,
			off+t.Len(), b.numel)
	}
	if t.IsDevice() && t.Device.Ordinal != b.g.opts.Device {
		return fmt.Errorf("%w: %s with a tensor on GPU %d; this group runs on GPU %d", pg.ErrInvalidArgument, what,
			t.Device.Ordinal, b.g.opts.Device)
	}
	return nil
}

// Upload enqueues src -> bucket[off:] on the copy stream.
func (b *deviceBucket) Upload(off int, src pg.Tensor) error {
	if err := b.span("upload", off, src); err != nil {
		return err
	}
	s := &b.g.dev
	s.mu.Lock()
	defer s.mu.Unlock()
	at, n := off*b.dtype.Size(), src.Bytes()
	if n == 0 {
		return nil
	}
	if src.IsDevice() {
		return s.copy.D2D(b.ptr+libnccl.DevicePtr(at), libnccl.DevicePtr(src.Device.Ptr), n)
	}
	if err := b.waitStaged(at, n); err != nil {
		return err
	}
	h := b.pinned[at : at+n]
	copy(h, src.Data)
	if err := s.copy.H2D(b.ptr+libnccl.DevicePtr(at), h); err != nil {
		return err
	}
	b.staged = append(b.staged, [2]int{at, at + n})
	return nil
}

// Note [staging in flight]
//
// An upload copies into the bucket's pinned staging memory and enqueues an
// H2D copy that reads it later, on the copy stream. Writing the same bytes
// again before that copy ran would change what it reads (a data race with
// the DMA). It happens when a slot is uploaded twice in one iteration: the
// reducer's NaN screening zeroes a slot already uploaded and uploads it
// again. So staged lists the spans whose copies may be pending; an upload
// that overlaps one first waits for the copy stream, bounded by the group
// timeout, and every wait for the stream (Download's included) clears the
// list. Uploads of distinct slots, the common case, never wait.

// waitStaged waits for the copy stream when [at, at+n) overlaps a staged
// span. Called with the device lock held.
func (b *deviceBucket) waitStaged(at, n int) error {
	overlap := false
	for _, sp := range b.staged {
		if at < sp[1] && sp[0] < at+n {
			overlap = true
			break
		}
	}
	if !overlap {
		return nil
	}
	timeout := b.g.opts.Timeout
	if timeout <= 0 {
		timeout = pg.DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := b.g.dev.copy.Synchronize(ctx); err != nil {
		return fmt.Errorf("nccl: device bucket upload: waiting for the staging copy: %w", err)
	}
	b.staged = b.staged[:0]
	return nil
}

// Seal records an event after the uploads; the next collective waits on it.
func (b *deviceBucket) Seal() error {
	s := &b.g.dev
	s.mu.Lock()
	ev, err := s.copy.Record()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	b.g.mu.Lock()
	s.sealed = append(s.sealed, ev)
	b.g.mu.Unlock()
	return nil
}

// Download copies bucket[off:off+dst.Len()] into dst on the copy stream
// and waits for it.
func (b *deviceBucket) Download(ctx context.Context, off int, dst pg.Tensor) error {
	if err := b.span("download", off, dst); err != nil {
		return err
	}
	at, n := off*b.dtype.Size(), dst.Bytes()
	if n == 0 {
		return nil
	}
	s := &b.g.dev
	s.mu.Lock()
	var err error
	if dst.IsDevice() {
		err = s.copy.D2D(libnccl.DevicePtr(dst.Device.Ptr), b.ptr+libnccl.DevicePtr(at), n)
	} else {
		err = s.copy.D2H(b.pinned[at:at+n], b.ptr+libnccl.DevicePtr(at))
	}
	s.mu.Unlock()
	if err == nil {
		err = s.copy.Synchronize(ctx)
	}
	if err != nil {
		return fmt.Errorf("nccl: device bucket download: %w", err)
	}
	s.mu.Lock()
	b.staged = b.staged[:0] // the stream is drained: Note [staging in flight]
	s.mu.Unlock()
	if !dst.IsDevice() {
		copy(dst.Data, b.pinned[at:at+n])
	}
	return nil
}

// Close deregisters and frees the bucket.
func (b *deviceBucket) Close() error {
	s := &b.g.dev
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.closed {
		return nil
	}
	s.buckets = slices.DeleteFunc(s.buckets, func(x *deviceBucket) bool { return x == b })
	return b.release()
}

// release undoes allocate; called with the device lock held.
func (b *deviceBucket) release() error {
	b.closed = true
	be := b.g.be
	var errs []error
	switch b.reg {
	case RegisterWindow:
		errs = append(errs, be.WindowDeregister(b.handle))
	case RegisterUser:
		errs = append(errs, be.Deregister(b.handle))
	}
	b.reg = RegisterNone
	if b.ptr != 0 {
		if b.fromNCCL {
			errs = append(errs, be.MemFree(b.ptr))
		} else {
			errs = append(errs, be.Free(b.ptr))
		}
		b.ptr = 0
	}
	if b.pinned != nil {
		errs = append(errs, be.FreeHost(b.pinned))
		b.pinned = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nccl: releasing a device bucket: %w", err)
	}
	return nil
}

// waitSealed makes the group's stream wait for every sealed upload
// before the collective being enqueued. Called with the issue lock held.
func (g *Group) waitSealed() error {
	evs := g.dev.sealed
	g.dev.sealed = nil
	for i, ev := range evs {
		if err := g.be.WaitEvent(ev); err != nil {
			for _, e := range evs[i:] {
				_ = e.Destroy()
			}
			return fmt.Errorf("nccl: waiting for a device bucket's upload: %w", err)
		}
		_ = ev.Destroy()
	}
	return nil
}

// releaseDevice releases the buckets still open and the copy stream, at
// Close, before the communicator is destroyed.
func (g *Group) releaseDevice(ctx context.Context) error {
	s := &g.dev
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.copy != nil {
		errs = append(errs, s.copy.Synchronize(ctx))
	}
	for _, b := range s.buckets {
		errs = append(errs, b.release())
	}
	s.buckets = nil
	for _, ev := range s.sealed {
		_ = ev.Destroy()
	}
	s.sealed = nil
	if s.copy != nil {
		errs = append(errs, s.copy.Destroy())
		s.copy = nil
	}
	return errors.Join(errs...)
}
