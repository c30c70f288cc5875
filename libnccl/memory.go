package libnccl

import (
	"fmt"
	"unsafe"
)

// NCCL's memory and registration APIs, each optional: a symbol the loaded
// library lacks leaves its field 0 and the method returns an error
// wrapping ErrUnsupported, so callers pick a fallback at run time
// (pg/nccl's registration policy, docs/nccl.md).
const (
	versionMemAlloc Version = 21900 // 2.19.0: ncclMemAlloc, ncclMemFree, ncclCommRegister, ncclCommDeregister
	versionWindow   Version = 22700 // 2.27.0: ncclCommWindowRegister, ncclCommWindowDeregister
)

// WinCollSymmetric is NCCL_WIN_COLL_SYMMETRIC: every rank registers a
// buffer of the same size allocated with ncclMemAlloc, so that collectives
// on it can use NCCL's symmetric kernels (nccl.h, 2.27).
const WinCollSymmetric = 0x01

// WinDefault is NCCL_WIN_DEFAULT.
const WinDefault = 0x00

// HasMemAlloc reports whether the library has ncclMemAlloc and
// ncclMemFree (NCCL 2.19).
func (l *Library) HasMemAlloc() bool {
	return l.Has(versionMemAlloc) && l.fn.memAlloc != 0 && l.fn.memFree != 0
}

// HasRegister reports whether the library has ncclCommRegister and
// ncclCommDeregister (NCCL 2.19).
func (l *Library) HasRegister() bool {
	return l.Has(versionMemAlloc) && l.fn.commRegister != 0 && l.fn.commDeregister != 0
}

// HasWindows reports whether the library has ncclCommWindowRegister and
// ncclCommWindowDeregister (NCCL 2.27).
func (l *Library) HasWindows() bool {
	return l.Has(versionWindow) && l.fn.winRegister != 0 && l.fn.winDeregister != 0
}

// MemAlloc is ncclMemAlloc (2.19) on dev: device memory that NCCL can
// register as a symmetric window (it is allocated with the CUDA virtual
// memory API and granularity NCCL needs). Free it with MemFree.
func (l *Library) MemAlloc(dev *Device, n int) (DevicePtr, error) {
	if !l.HasMemAlloc() {
		return 0, l.unsupported("ncclMemAlloc", versionMemAlloc)
	}
	if n <= 0 {
		return 0, fmt.Errorf("nccl: ncclMemAlloc of %d bytes", n)
	}
	var p DevicePtr
	err := dev.Do(func() error {
		return l.check("ncclMemAlloc", 0, l.fn.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))
	})
	return p, err
}

// MemFree is ncclMemFree.
func (l *Library) MemFree(dev *Device, p DevicePtr) error {
	if !l.HasMemAlloc() {
		return l.unsupported("ncclMemFree", versionMemAlloc)
	}
	return dev.Do(func() error { return l.check("ncclMemFree", 0, l.fn.memFree, uintptr(p)) })
}

// Registration is the handle of a user buffer registered with
// ncclCommRegister.
type Registration uintptr

// Register is ncclCommRegister (2.19): it registers n bytes at p with the
// communicator for zero-copy communication. It is local (no other rank
// takes part). Deregister releases it, before the memory is freed.
func (c *Comm) Register(p DevicePtr, n int) (Registration, error) {
	if !c.lib.HasRegister() {
		return 0, c.lib.unsupported("ncclCommRegister", versionMemAlloc)
	}
	h := new(uintptr)
	err := c.do("ncclCommRegister", c.lib.fn.commRegister, c.h, uintptr(p), uintptr(n), uintptr(unsafe.Pointer(h)))
	return Registration(*h), err
}

// Deregister is ncclCommDeregister. After Abort or Destroy it does
// nothing: freeing the communicator released its registrations.
func (c *Comm) Deregister(r Registration) error {
	if !c.lib.HasRegister() {
		return c.lib.unsupported("ncclCommDeregister", versionMemAlloc)
	}
	if c.aborted.Load() {
		return nil
	}
	return c.do("ncclCommDeregister", c.lib.fn.commDeregister, c.h, uintptr(r))
}

// Window is ncclWindow_t.
type Window uintptr

// WindowRegister is ncclCommWindowRegister (2.27): a collective call, so
// every rank of the communicator must make it, in the same order, with a
// buffer of its own. With flags WinCollSymmetric the buffers must come
// from MemAlloc and have the same size on every rank. WindowDeregister
// (also collective) releases it.
func (c *Comm) WindowRegister(p DevicePtr, n int, flags int) (Window, error) {
	if !c.lib.HasWindows() {
		return 0, c.lib.unsupported("ncclCommWindowRegister", versionWindow)
	}
	w := new(uintptr)
	err := c.do("ncclCommWindowRegister", c.lib.fn.winRegister, c.h, uintptr(p), uintptr(n), uintptr(unsafe.Pointer(w)),
		uintptr(int64(flags)))
	return Window(*w), err
}

// WindowDeregister is ncclCommWindowDeregister. Like WindowRegister it
// is collective: every rank deregisters its windows in the same order.
// After Abort or Destroy it does nothing: freeing the communicator
// released its windows.
func (c *Comm) WindowDeregister(w Window) error {
	if !c.lib.HasWindows() {
		return c.lib.unsupported("ncclCommWindowDeregister", versionWindow)
	}
	if c.aborted.Load() {
		return nil
	}
	return c.do("ncclCommWindowDeregister", c.lib.fn.winDeregister, c.h, uintptr(w))
}

// WaitEvent is cuStreamWaitEvent: work enqueued on s after the call waits
// until the device has passed the point e recorded, without blocking the
// host. It is how a collective on one stream waits for a copy on another.
func (s *Stream) WaitEvent(e *Event) error {
	return s.d.call("cuStreamWaitEvent", s.d.cu.fn.streamWaitEvent, s.h, e.h, 0)
}
