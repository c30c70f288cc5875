package libnccl

import (
	"errors"
	"fmt"
)

// Result is ncclResult_t. Every non-success value is an error; errors.Is
// matches a returned *Error against the Result it carries.
type Result int32

// NCCL's result codes (nccl.h, stable since 2.0; InProgress since 2.14,
// Timeout since 2.29).
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	Timeout            Result = 8
)

func (r Result) String() string {
	switch r {
	case Success:
		return "ncclSuccess"
	case UnhandledCudaError:
		return "ncclUnhandledCudaError"
	case SystemError:
		return "ncclSystemError"
	case InternalError:
		return "ncclInternalError"
	case InvalidArgument:
		return "ncclInvalidArgument"
	case InvalidUsage:
		return "ncclInvalidUsage"
	case RemoteError:
		return "ncclRemoteError"
	case InProgress:
		return "ncclInProgress"
	case Timeout:
		return "ncclTimeout"
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// Error makes a Result usable as an error value for errors.Is.
func (r Result) Error() string { return r.String() }

// Error is a failed NCCL call: which function, the result code, NCCL's
// string for it and, where NCCL had one, its last error message.
type Error struct {
	Func   string // "ncclAllReduce"
	Code   Result
	Desc   string // ncclGetErrorString(Code)
	Detail string // ncclGetLastError, may be empty
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("nccl: %s: %v", e.Func, e.Code)
	if e.Desc != "" {
		msg += " (" + e.Desc + ")"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the Result, so errors.Is(err, libnccl.RemoteError) works.
func (e *Error) Unwrap() error { return e.Code }

// ResultOf returns the Result an error carries, Success for nil and
// InternalError for errors that carry none.
func ResultOf(err error) Result {
	if err == nil {
		return Success
	}
	var r Result
	if errors.As(err, &r) {
		return r
	}
	return InternalError
}

// CUDAError is a failed CUDA driver call (CUresult).
type CUDAError struct {
	Func string // "cuMemAlloc_v2"
	Code int32  // CUresult
	Name string // cuGetErrorName
	Desc string // cuGetErrorString
}

func (e *CUDAError) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Func, e.Name, e.Code, e.Desc)
}

// ErrUnsupported is wrapped by errors for calls the loaded library's
// version does not have.
var ErrUnsupported = errors.New("not supported by this NCCL")

// ErrNotReady is returned by Event.Query while the event's work is still
// running (CUDA_ERROR_NOT_READY).
var ErrNotReady = errors.New("cuda: not ready")
