package libnccl

import (
	"fmt"
	"runtime"
	"unsafe"
)

// CUDAOptions says where LoadCUDA looks for the CUDA driver.
type CUDAOptions struct {
	// Path, if set, is the only file tried.
	Path string
}

// CUDALibraryName is the driver API's soname.
const CUDALibraryName = "libcuda.so.1"

const cudaHint = "libcuda.so.1 comes with the NVIDIA driver; on a machine without a GPU driver the NCCL backend " +
	"cannot run. " +
	"If the driver is installed in an unusual place, point at libcuda.so.1 with the option that sets " +
	"libnccl.CUDAOptions.Path."

// CUDA is the loaded CUDA driver API (libcuda.so.1). The driver is used
// rather than the runtime (libcudart) because it is always installed
// with the driver, while the runtime's soname changes with every CUDA
// major version. Handles are interchangeable: a CUstream is a
// cudaStream_t, and NCCL's runtime calls use the primary context this
// package makes current.
type CUDA struct {
	path    string
	version int
	fn      cuFuncs
}

type cuFuncs struct {
	init, driverGetVersion, getErrorName, getErrorString                         uintptr
	deviceGetCount, deviceGet, primaryCtxRetain, primaryCtxRelease, ctxSetCur    uintptr
	memAlloc, memFree, memAllocHost, memFreeHost, memsetD8, memsetD8Async        uintptr
	memcpyHtoD, memcpyDtoH, memcpyHtoDAsync, memcpyDtoHAsync, memcpyDtoDAsync    uintptr
	streamCreate, streamDestroy, streamSynchronize, streamQuery, streamWaitEvent uintptr
	eventCreate, eventDestroy, eventRecord, eventQuery, eventSynchronize         uintptr
	eventElapsedTime, ctxSynchronize                                             uintptr
}

func (f *cuFuncs) table() map[string]*uintptr {
	return map[string]*uintptr{
		"cuInit": &f.init, "cuDriverGetVersion": &f.driverGetVersion, "cuGetErrorName": &f.getErrorName,
		"cuGetErrorString": &f.getErrorString, "cuDeviceGetCount": &f.deviceGetCount, "cuDeviceGet": &f.deviceGet,
		"cuDevicePrimaryCtxRetain": &f.primaryCtxRetain, "cuDevicePrimaryCtxRelease_v2": &f.primaryCtxRelease,
		"cuCtxSetCurrent": &f.ctxSetCur, "cuCtxSynchronize": &f.ctxSynchronize,
		"cuMemAlloc_v2": &f.memAlloc, "cuMemFree_v2": &f.memFree, "cuMemAllocHost_v2": &f.memAllocHost,
		"cuMemFreeHost": &f.memFreeHost, "cuMemsetD8_v2": &f.memsetD8, "cuMemsetD8Async": &f.memsetD8Async,
		"cuMemcpyHtoD_v2": &f.memcpyHtoD, "cuMemcpyDtoH_v2": &f.memcpyDtoH,
		"cuMemcpyHtoDAsync_v2": &f.memcpyHtoDAsync, "cuMemcpyDtoHAsync_v2": &f.memcpyDtoHAsync,
		"cuMemcpyDtoDAsync_v2": &f.memcpyDtoDAsync,
		"cuStreamCreate":       &f.streamCreate, "cuStreamDestroy_v2": &f.streamDestroy,
		"cuStreamSynchronize": &f.streamSynchronize, "cuStreamQuery": &f.streamQuery, "cuStreamWaitEvent": &f.streamWaitEvent,
		"cuEventCreate": &f.eventCreate, "cuEventDestroy_v2": &f.eventDestroy, "cuEventRecord": &f.eventRecord,
		"cuEventQuery": &f.eventQuery, "cuEventSynchronize": &f.eventSynchronize,
		"cuEventElapsedTime": &f.eventElapsedTime,
	}
}

const cudaErrorNotReady = 600

// LoadCUDA opens the CUDA driver and initialises it (cuInit).
func LoadCUDA(opts CUDAOptions) (*CUDA, error) {
	cands := []string{CUDALibraryName, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
		"/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"}
	if opts.Path != "" {
		cands = []string{opts.Path}
	}
	h, path, err := dlopenFirst(CUDALibraryName, cudaHint, cands)
	if err != nil {
		return nil, err
	}
	c := &CUDA{path: path}
	tab := c.fn.table()
	symbols(h, tab)
	for name, p := range tab {
		if *p == 0 {
			return nil, fmt.Errorf("cuda: %s has no %s (driver too old?)", path, name)
		}
	}
	if err := c.check("cuInit", c.fn.init, 0); err != nil {
		return nil, err
	}
	var v int32
	if err := c.check("cuDriverGetVersion", c.fn.driverGetVersion, uintptr(unsafe.Pointer(&v))); err != nil {
		return nil, err
	}
	c.version = int(v)
	return c, nil
}

// DriverVersion is cuDriverGetVersion: 1000*major + 10*minor (13000 for 13.0).
func (c *CUDA) DriverVersion() int { return c.version }

// Path is the file that was opened.
func (c *CUDA) Path() string { return c.path }

//go:uintptrescapes
func (c *CUDA) check(name string, fn uintptr, args ...uintptr) error {
	r := int32(callPtr(fn, args...))
	if r == 0 {
		return nil
	}
	if r == cudaErrorNotReady {
		return ErrNotReady
	}
	var pn, ps uintptr
	callPtr(c.fn.getErrorName, uintptr(r), uintptr(unsafe.Pointer(&pn)))
	callPtr(c.fn.getErrorString, uintptr(r), uintptr(unsafe.Pointer(&ps)))
	return &CUDAError{Func: name, Code: r, Name: cString(pn), Desc: cString(ps)}
}

// DeviceCount is cuDeviceGetCount.
func (c *CUDA) DeviceCount() (int, error) {
	var n int32
	err := c.check("cuDeviceGetCount", c.fn.deviceGetCount, uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

// Device is one GPU with its primary context retained.
type Device struct {
	cu      *CUDA
	ordinal int
	ctx     uintptr
}

// Device retains the primary context of GPU ordinal. Close releases it.
func (c *CUDA) Device(ordinal int) (*Device, error) {
	var dev int32
	if err := c.check("cuDeviceGet", c.fn.deviceGet, uintptr(unsafe.Pointer(&dev)), uintptr(ordinal)); err != nil {
		return nil, err
	}
	d := &Device{cu: c, ordinal: ordinal}
	if err := c.check("cuDevicePrimaryCtxRetain", c.fn.primaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)),
		uintptr(dev)); err != nil {
		return nil, err
	}
	return d, nil
}

// Ordinal is the device number.
func (d *Device) Ordinal() int { return d.ordinal }

// Close releases the primary context.
func (d *Device) Close() error {
	return d.cu.check("cuDevicePrimaryCtxRelease", d.cu.fn.primaryCtxRelease, uintptr(d.ordinal))
}

// Do runs f on a locked OS thread with the device's context current.
// Calls nest. Every method of Device, Stream, Event and Comm goes through
// it, so callers need not lock threads themselves.
func (d *Device) Do(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.cu.check("cuCtxSetCurrent", d.cu.fn.ctxSetCur, d.ctx); err != nil {
		return err
	}
	return f()
}

//go:uintptrescapes
func (d *Device) call(name string, fn uintptr, args ...uintptr) error {
	return d.Do(func() error { return d.cu.check(name, fn, args...) })
}

// Synchronize is cuCtxSynchronize.
func (d *Device) Synchronize() error { return d.call("cuCtxSynchronize", d.cu.fn.ctxSynchronize) }

// DevicePtr is a device address (CUdeviceptr).
type DevicePtr uintptr

// Malloc is cuMemAlloc. It implicitly synchronizes nothing; Free does.
func (d *Device) Malloc(n int) (DevicePtr, error) {
	var p DevicePtr
	if n == 0 {
		n = 1
	}
	err := d.call("cuMemAlloc", d.cu.fn.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n))
	return p, err
}

// Free is cuMemFree.
func (d *Device) Free(p DevicePtr) error { return d.call("cuMemFree", d.cu.fn.memFree, uintptr(p)) }

// MallocHost is cuMemAllocHost: page-locked host memory that async copies
// use directly. FreeHost releases it.
func (d *Device) MallocHost(n int) ([]byte, error) {
	var p unsafe.Pointer
	if n == 0 {
		n = 1
	}
	if err := d.call("cuMemAllocHost", d.cu.fn.memAllocHost, uintptr(unsafe.Pointer(&p)), uintptr(n)); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost is cuMemFreeHost.
func (d *Device) FreeHost(b []byte) error {
	return d.call("cuMemFreeHost", d.cu.fn.memFreeHost, uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// Memset is cuMemsetD8 followed by cuCtxSynchronize: when it returns the
// memory is set as seen from every stream. (cuMemsetD8 alone returns
// before the device has written, and work on a non-blocking stream does
// not wait for it.)
func (d *Device) Memset(p DevicePtr, v byte, n int) error {
	return d.Do(func() error {
		if err := d.cu.check("cuMemsetD8", d.cu.fn.memsetD8, uintptr(p), uintptr(v), uintptr(n)); err != nil {
			return err
		}
		return d.cu.check("cuCtxSynchronize", d.cu.fn.ctxSynchronize)
	})
}

// CopyHtoD copies src to dst and synchronizes the context, so that the
// data is on the device for every stream. src may be any host memory.
func (d *Device) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.Do(func() error {
		if err := d.cu.check("cuMemcpyHtoD", d.cu.fn.memcpyHtoD, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))),
			uintptr(len(src))); err != nil {
			return err
		}
		return d.cu.check("cuCtxSynchronize", d.cu.fn.ctxSynchronize)
	})
}

// CopyDtoH copies src to dst synchronously.
func (d *Device) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.call("cuMemcpyDtoH", d.cu.fn.memcpyDtoH, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src),
		uintptr(len(dst)))
}

// Stream is a CUDA stream (CUstream, the same handle as cudaStream_t).
type Stream struct {
	d *Device
	h uintptr
}

// NewStream creates a stream that does not synchronize with the legacy
// default stream (CU_STREAM_NON_BLOCKING).
func (d *Device) NewStream() (*Stream, error) {
	s := &Stream{d: d}
	err := d.call("cuStreamCreate", d.cu.fn.streamCreate, uintptr(unsafe.Pointer(&s.h)), 1)
	return s, err
}

// Handle is the raw CUstream.
func (s *Stream) Handle() uintptr { return s.h }

// Destroy is cuStreamDestroy.
func (s *Stream) Destroy() error { return s.d.call("cuStreamDestroy", s.d.cu.fn.streamDestroy, s.h) }

// Synchronize is cuStreamSynchronize.
func (s *Stream) Synchronize() error {
	return s.d.call("cuStreamSynchronize", s.d.cu.fn.streamSynchronize, s.h)
}

// CopyHtoD is cuMemcpyHtoDAsync; src must be page-locked (MallocHost)
// and stay untouched until the stream passes the copy.
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return s.d.call("cuMemcpyHtoDAsync", s.d.cu.fn.memcpyHtoDAsync, uintptr(dst),
		uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), s.h)
}

// CopyDtoH is cuMemcpyDtoHAsync; dst must be page-locked.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return s.d.call("cuMemcpyDtoHAsync", s.d.cu.fn.memcpyDtoHAsync, uintptr(unsafe.Pointer(unsafe.SliceData(dst))),
		uintptr(src), uintptr(len(dst)), s.h)
}

// CopyDtoD is cuMemcpyDtoDAsync.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n int) error {
	if n == 0 {
		return nil
	}
	return s.d.call("cuMemcpyDtoDAsync", s.d.cu.fn.memcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), s.h)
}

// Memset is cuMemsetD8Async.
func (s *Stream) Memset(p DevicePtr, v byte, n int) error {
	return s.d.call("cuMemsetD8Async", s.d.cu.fn.memsetD8Async, uintptr(p), uintptr(v), uintptr(n), s.h)
}

// Event is a CUDA event.
type Event struct {
	d *Device
	h uintptr
}

// NewEvent creates an event; timing events can be passed to Elapsed.
func (d *Device) NewEvent(timing bool) (*Event, error) {
	e := &Event{d: d}
	flags := uintptr(2) // CU_EVENT_DISABLE_TIMING
	if timing {
		flags = 0
	}
	err := d.call("cuEventCreate", d.cu.fn.eventCreate, uintptr(unsafe.Pointer(&e.h)), flags)
	return e, err
}

// Record is cuEventRecord on s.
func (e *Event) Record(s *Stream) error {
	return e.d.call("cuEventRecord", e.d.cu.fn.eventRecord, e.h, s.h)
}

// Query is cuEventQuery: nil once the recorded work is done, ErrNotReady
// while it runs, or the error of the work.
func (e *Event) Query() error { return e.d.call("cuEventQuery", e.d.cu.fn.eventQuery, e.h) }

// Synchronize is cuEventSynchronize.
func (e *Event) Synchronize() error {
	return e.d.call("cuEventSynchronize", e.d.cu.fn.eventSynchronize, e.h)
}

// Destroy is cuEventDestroy.
func (e *Event) Destroy() error { return e.d.call("cuEventDestroy", e.d.cu.fn.eventDestroy, e.h) }

// Elapsed is cuEventElapsedTime(start, e) in milliseconds.
func (e *Event) Elapsed(start *Event) (float32, error) {
	var ms float32
	err := e.d.call("cuEventElapsedTime", e.d.cu.fn.eventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.h, e.h)
	return ms, err
}
