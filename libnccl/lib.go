package libnccl

import (
	"fmt"
	"path/filepath"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Library is a loaded libnccl.so.2. Its methods are safe for concurrent
// use. It is never unloaded: NCCL keeps threads of its own.
type Library struct {
	path    string
	version Version
	fn      ncclFuncs
}

// ncclFuncs holds the symbols, with the NCCL version each needs.
type ncclFuncs struct {
	getVersion        uintptr // 2.3
	getUniqueID       uintptr // 2.0
	commInitRank      uintptr // 2.0
	commInitRankCfg   uintptr // 2.14
	commInitAll       uintptr // 2.0
	commDestroy       uintptr // 2.0
	commAbort         uintptr // 2.4
	commFinalize      uintptr // 2.14
	commGetAsyncError uintptr // 2.4
	commSplit         uintptr // 2.18
	commCount         uintptr // 2.0
	commCuDevice      uintptr // 2.0
	commUserRank      uintptr // 2.0
	getErrorString    uintptr // 2.0
	getLastError      uintptr // 2.13
	allReduce         uintptr // 2.0
	reduce            uintptr // 2.0
	broadcast         uintptr // 2.2
	allGather         uintptr // 2.0
	reduceScatter     uintptr // 2.0
	send              uintptr // 2.7
	recv              uintptr // 2.7
	groupStart        uintptr // 2.0
	groupEnd          uintptr // 2.0
	redOpCreatePMS    uintptr // 2.11
	redOpDestroy      uintptr // 2.11
	memAlloc          uintptr // 2.19
	memFree           uintptr // 2.19
	commRegister      uintptr // 2.19
	commDeregister    uintptr // 2.19
	winRegister       uintptr // 2.27
	winDeregister     uintptr // 2.27
}

func (f *ncclFuncs) table() map[string]*uintptr {
	return map[string]*uintptr{
		"ncclGetVersion": &f.getVersion, "ncclGetUniqueId": &f.getUniqueID,
		"ncclCommInitRank": &f.commInitRank, "ncclCommInitRankConfig": &f.commInitRankCfg,
		"ncclCommInitAll": &f.commInitAll, "ncclCommDestroy": &f.commDestroy, "ncclCommAbort": &f.commAbort,
		"ncclCommFinalize": &f.commFinalize, "ncclCommGetAsyncError": &f.commGetAsyncError,
		"ncclCommSplit": &f.commSplit, "ncclCommCount": &f.commCount, "ncclCommCuDevice": &f.commCuDevice,
		"ncclCommUserRank": &f.commUserRank, "ncclGetErrorString": &f.getErrorString,
		"ncclGetLastError": &f.getLastError, "ncclAllReduce": &f.allReduce, "ncclReduce": &f.reduce,
		"ncclBroadcast": &f.broadcast, "ncclAllGather": &f.allGather, "ncclReduceScatter": &f.reduceScatter,
		"ncclSend": &f.send, "ncclRecv": &f.recv, "ncclGroupStart": &f.groupStart, "ncclGroupEnd": &f.groupEnd,
		"ncclRedOpCreatePreMulSum": &f.redOpCreatePMS, "ncclRedOpDestroy": &f.redOpDestroy,
		"ncclMemAlloc": &f.memAlloc, "ncclMemFree": &f.memFree,
		"ncclCommRegister": &f.commRegister, "ncclCommDeregister": &f.commDeregister,
		"ncclCommWindowRegister": &f.winRegister, "ncclCommWindowDeregister": &f.winDeregister,
	}
}

// Load opens NCCL from the first place in opts that has it (see Options)
// and reads its version. A missing library gives a *LoadError listing
// every place tried.
func Load(opts Options) (*Library, error) {
	h, path, err := dlopenFirst(LibraryName, ncclHint, opts.candidates(filepath.Glob))
	if err != nil {
		return nil, err
	}
	l := &Library{path: path}
	symbols(h, l.fn.table())
	for name, p := range map[string]uintptr{"ncclGetVersion": l.fn.getVersion, "ncclGetUniqueId": l.fn.getUniqueID,
		"ncclCommInitRank": l.fn.commInitRank, "ncclAllReduce": l.fn.allReduce, "ncclGroupEnd": l.fn.groupEnd,
		"ncclGetErrorString": l.fn.getErrorString, "ncclCommDestroy": l.fn.commDestroy} {
		if p == 0 {
			return nil, fmt.Errorf("nccl: %s has no %s: not an NCCL 2 library", path, name)
		}
	}
	var v int32
	if err := l.check("ncclGetVersion", 0, l.fn.getVersion, uintptr(unsafe.Pointer(&v))); err != nil {
		return nil, err
	}
	l.version = Version(v)
	return l, nil
}

// Path is the file that was opened (or the bare soname when the system's
// search path found it).
func (l *Library) Path() string { return l.path }

// Version is the library's NCCL_VERSION_CODE, from ncclGetVersion.
func (l *Library) Version() Version { return l.version }

// Has reports whether the library has every API of version v.
func (l *Library) Has(v Version) bool { return l.version >= v }

// call invokes fn and returns its ncclResult_t.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(int32(r))
}

// check calls fn and turns a failure into an *Error, with comm's last
// error message where NCCL has one.
//
//go:uintptrescapes
func (l *Library) check(name string, comm uintptr, fn uintptr, args ...uintptr) error {
	if fn == 0 {
		return l.unsupported(name, 0)
	}
	if r := call(fn, args...); r != Success {
		return l.errorOf(name, r, comm)
	}
	return nil
}

func (l *Library) errorOf(name string, r Result, comm uintptr) error {
	e := &Error{Func: name, Code: r, Desc: l.ErrorString(r)}
	if r != InProgress && l.fn.getLastError != 0 {
		e.Detail = cString(callPtr(l.fn.getLastError, comm))
	}
	return e
}

func (l *Library) unsupported(name string, need Version) error {
	if need != 0 {
		return fmt.Errorf("nccl: %s needs NCCL %v, %s is %v: %w", name, need, l.path, l.version, ErrUnsupported)
	}
	return fmt.Errorf("nccl: %s is missing from %s (NCCL %v): %w", name, l.path, l.version, ErrUnsupported)
}

// ErrorString is ncclGetErrorString(r).
func (l *Library) ErrorString(r Result) string {
	return cString(callPtr(l.fn.getErrorString, uintptr(uint32(r))))
}

// LastError is ncclGetLastError(NULL) (NCCL 2.13): the last error
// message of any communicator, or "" where the library lacks it.
func (l *Library) LastError() string {
	if l.fn.getLastError == 0 {
		return ""
	}
	return cString(callPtr(l.fn.getLastError, 0))
}

//go:uintptrescapes
func callPtr(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// cString copies the NUL-terminated C string at p.
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	base := *(*unsafe.Pointer)(unsafe.Pointer(&p)) // C memory, never moved by Go
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// UniqueID is ncclUniqueId: the 128 bytes rank 0 makes and every rank
// passes to CommInitRank.
type UniqueID [128]byte

// UniqueID is ncclGetUniqueId.
func (l *Library) UniqueID() (UniqueID, error) {
	var id UniqueID
	err := l.check("ncclGetUniqueId", 0, l.fn.getUniqueID, uintptr(unsafe.Pointer(&id)))
	return id, err
}

// GroupStart is ncclGroupStart. Calls between GroupStart and GroupEnd on
// one thread are fused; the caller must keep its goroutine on one OS
// thread (Device.Do does) from GroupStart to GroupEnd.
func (l *Library) GroupStart() error {
	return l.check("ncclGroupStart", 0, l.fn.groupStart)
}

// GroupEnd is ncclGroupEnd.
func (l *Library) GroupEnd() error {
	return l.check("ncclGroupEnd", 0, l.fn.groupEnd)
}
