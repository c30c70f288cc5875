package libnccl

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Comm is an NCCL communicator (ncclComm_t) bound to one device. Its
// methods may be called from any goroutine; each runs on a locked thread
// with the device current (Device.Do). As NCCL requires, calls on one
// communicator must not run concurrently: the caller serialises them (the
// process group does so on its issue path).
type Comm struct {
	lib         *Library
	dev         *Device
	h           uintptr
	nonBlocking bool
	aborted     atomic.Bool
}

// config is ncclConfig_t up to splitShare, the layout of NCCL 2.17.
// NCCL copies config.size bytes and defaults every field a version older
// than the one in config.version did not have, so newer libraries accept
// it unchanged (src/init.cc, parseCommConfig).
type config struct {
	size           uintptr
	magic          uint32
	version        uint32
	blocking       int32
	cgaClusterSize int32
	minCTAs        int32
	maxCTAs        int32
	netName        uintptr
	splitShare     int32
}

const (
	configUndefInt = -2147483648 // NCCL_CONFIG_UNDEF_INT
	configSize     = 44          // offsetof(ncclConfig_t, trafficClass)
)

func newConfig(blocking bool) *config {
	c := &config{size: configSize, magic: 0xcafebeef, version: 21700, blocking: 1,
		cgaClusterSize: configUndefInt, minCTAs: configUndefInt, maxCTAs: configUndefInt, splitShare: configUndefInt}
	if !blocking {
		c.blocking = 0
	}
	return c
}

// pollInterval is how often a non-blocking call's state is polled.
const pollInterval = 200 * time.Microsecond

// CommInitRank creates this rank's communicator on dev. With NCCL 2.14 or
// newer it is created non-blocking (ncclCommInitRankConfig, blocking=0)
// and polled, so that when ctx ends first the half-made communicator is
// aborted and an error wrapping ctx's returned. Older libraries block in
// ncclCommInitRank (2.0) until every rank has joined.
func (l *Library) CommInitRank(ctx context.Context, dev *Device, nranks int, id UniqueID, rank int) (*Comm, error) {
	c := &Comm{lib: l, dev: dev, nonBlocking: l.Has(versionInitConfig) && l.fn.commInitRankCfg != 0}
	var r Result
	err := dev.Do(func() error {
		if c.nonBlocking {
			r = initRankConfig(l.fn.commInitRankCfg, &c.h, nranks, &id, rank, newConfig(false))
			return nil
		}
		r = initRank(l.fn.commInitRank, &c.h, nranks, &id, rank)
		return nil
	})
	if err != nil {
		return nil, err
	}
	name := "ncclCommInitRankConfig"
	if !c.nonBlocking {
		name = "ncclCommInitRank"
	}
	if err := c.settle(ctx, name, r); err != nil {
		if c.h != 0 {
			_ = c.Abort()
		}
		return nil, err
	}
	return c, nil
}

// CommInitAll is ncclCommInitAll (2.0): one communicator per device, for a
// process that drives several GPUs. Rank i runs on devs[i].
func (l *Library) CommInitAll(devs []*Device) ([]*Comm, error) {
	if len(devs) == 0 {
		return nil, fmt.Errorf("nccl: CommInitAll needs at least one device")
	}
	hs := make([]uintptr, len(devs))
	list := make([]int32, len(devs))
	for i, d := range devs {
		list[i] = int32(d.ordinal)
	}
	err := devs[0].Do(func() error {
		return l.check("ncclCommInitAll", 0, l.fn.commInitAll, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(devs)),
			uintptr(unsafe.Pointer(&list[0])))
	})
	if err != nil {
		return nil, err
	}
	out := make([]*Comm, len(devs))
	for i := range devs {
		out[i] = &Comm{lib: l, dev: devs[i], h: hs[i]}
	}
	return out, nil
}

// settle waits out ncclInProgress: on a non-blocking communicator it
// polls ncclCommGetAsyncError until the state leaves InProgress, ctx ends
// (then it returns an error wrapping ctx's cause; the caller aborts), or
// the communicator is aborted. NCCL may return Success from a
// non-blocking call and still run it (ncclCommSplit does), so the state
// is polled whatever r says.
func (c *Comm) settle(ctx context.Context, name string, r Result) error {
	if r != Success && r != InProgress {
		return c.lib.errorOf(name, r, c.h)
	}
	if !c.nonBlocking && r == Success {
		return nil
	}
	for {
		state, err := c.AsyncError()
		if err != nil {
			return err
		}
		switch {
		case state == Success:
			return nil
		case state != InProgress:
			return c.lib.errorOf(name, state, c.h)
		case c.aborted.Load():
			return fmt.Errorf("nccl: %s: communicator aborted", name)
		}
		if ctx != nil {
			select {
			case <-ctx.Done():
				return fmt.Errorf("nccl: %s still in progress: %w", name, context.Cause(ctx))
			default:
			}
		}
		time.Sleep(pollInterval)
	}
}

// do runs an NCCL call on this communicator's device and settles it.
//
//go:uintptrescapes
func (c *Comm) do(name string, fn uintptr, args ...uintptr) error {
	if fn == 0 {
		return c.lib.unsupported(name, 0)
	}
	var r Result
	if err := c.dev.Do(func() error { r = call(fn, args...); return nil }); err != nil {
		return err
	}
	return c.settle(context.Background(), name, r)
}

// Device is the communicator's device.
func (c *Comm) Device() *Device { return c.dev }

// Library is the library the communicator came from.
func (c *Comm) Library() *Library { return c.lib }

// NonBlocking reports whether the communicator was created with
// blocking=0.
func (c *Comm) NonBlocking() bool { return c.nonBlocking }

// AsyncError is ncclCommGetAsyncError (2.4): Success, InProgress while a
// non-blocking call runs, or the asynchronous error that broke the
// communicator (a peer failed, a network error).
func (c *Comm) AsyncError() (Result, error) {
	if c.lib.fn.commGetAsyncError == 0 {
		return Success, c.lib.unsupported("ncclCommGetAsyncError", 0)
	}
	state := new(int32)
	r := call(c.lib.fn.commGetAsyncError, c.h, uintptr(unsafe.Pointer(state)))
	if r != Success {
		return Success, c.lib.errorOf("ncclCommGetAsyncError", r, c.h)
	}
	return Result(*state), nil
}

// Count is ncclCommCount.
func (c *Comm) Count() (int, error) {
	n := new(int32)
	err := c.lib.check("ncclCommCount", c.h, c.lib.fn.commCount, c.h, uintptr(unsafe.Pointer(n)))
	return int(*n), err
}

// UserRank is ncclCommUserRank.
func (c *Comm) UserRank() (int, error) {
	n := new(int32)
	err := c.lib.check("ncclCommUserRank", c.h, c.lib.fn.commUserRank, c.h, uintptr(unsafe.Pointer(n)))
	return int(*n), err
}

// CuDevice is ncclCommCuDevice.
func (c *Comm) CuDevice() (int, error) {
	n := new(int32)
	err := c.lib.check("ncclCommCuDevice", c.h, c.lib.fn.commCuDevice, c.h, uintptr(unsafe.Pointer(n)))
	return int(*n), err
}

// LastError is ncclGetLastError(comm) (2.13), or "".
func (c *Comm) LastError() string {
	if c.lib.fn.getLastError == 0 {
		return ""
	}
	return cString(callPtr(c.lib.fn.getLastError, c.h))
}

// Abort is ncclCommAbort (2.4): it stops the communicator's work on the
// device without waiting for peers and frees it. It may be called from
// any goroutine, also while another call on the communicator is stuck;
// it is the only call that may. Later calls fail.
func (c *Comm) Abort() error {
	if !c.aborted.CompareAndSwap(false, true) {
		return nil
	}
	return c.dev.Do(func() error {
		return c.lib.check("ncclCommAbort", 0, c.lib.fn.commAbort, c.h)
	})
}

// Destroy is ncclCommDestroy: it waits for the communicator's pending work
// and frees it. On a non-blocking communicator it first finalizes
// (ncclCommFinalize, 2.14) and polls, so ctx bounds the wait; if ctx ends
// the communicator is aborted instead.
func (c *Comm) Destroy(ctx context.Context) error {
	if c.aborted.Load() {
		return nil
	}
	if c.nonBlocking && c.lib.fn.commFinalize != 0 {
		var r Result
		_ = c.dev.Do(func() error { r = call(c.lib.fn.commFinalize, c.h); return nil })
		if err := c.settle(ctx, "ncclCommFinalize", r); err != nil {
			_ = c.Abort()
			return err
		}
	}
	c.aborted.Store(true)
	return c.dev.Do(func() error {
		return c.lib.check("ncclCommDestroy", 0, c.lib.fn.commDestroy, c.h)
	})
}

// Split is ncclCommSplit (2.18): ranks with the same color form a new
// communicator, ordered by key; color NoColor (-1) returns nil. The new
// communicator is non-blocking like its parent and ctx bounds its
// creation.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if !c.lib.Has(versionSplit) || c.lib.fn.commSplit == 0 {
		return nil, c.lib.unsupported("ncclCommSplit", versionSplit)
	}
	n := &Comm{lib: c.lib, dev: c.dev, nonBlocking: c.nonBlocking}
	cfg := newConfig(!c.nonBlocking)
	var r Result
	_ = c.dev.Do(func() error {
		r = call(c.lib.fn.commSplit, c.h, uintptr(int64(color)), uintptr(int64(key)), uintptr(unsafe.Pointer(&n.h)),
			uintptr(unsafe.Pointer(cfg)))
		return nil
	})
	runtime.KeepAlive(cfg)
	// The parent is busy until the split is done; NCCL's own thread
	// writes the child's handle when it has made it.
	if err := c.settle(ctx, "ncclCommSplit", r); err != nil {
		return nil, err
	}
	n.h = atomic.LoadUintptr(&n.h)
	if color == NoColor {
		if n.h != 0 {
			_ = n.Abort()
		}
		return nil, nil
	}
	if n.h == 0 {
		return nil, fmt.Errorf("nccl: ncclCommSplit returned no communicator for color %d", color)
	}
	if err := n.settle(ctx, "ncclCommSplit", InProgress); err != nil {
		_ = n.Abort()
		return nil, err
	}
	return n, nil
}

// NoColor is NCCL_SPLIT_NOCOLOR.
const NoColor = -1

// Group runs f between ncclGroupStart and ncclGroupEnd on one locked
// thread with the device current, and settles the group on c.
func (c *Comm) Group(f func() error) error {
	var r Result
	err := c.dev.Do(func() error {
		if err := c.lib.GroupStart(); err != nil {
			return err
		}
		ferr := f()
		r = call(c.lib.fn.groupEnd)
		return ferr
	})
	if err != nil {
		return err
	}
	return c.settle(context.Background(), "ncclGroupEnd", r)
}
