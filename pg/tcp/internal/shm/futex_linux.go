//go:build linux

package shm

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	spin   = 2000                 // loads before a wait sleeps in the kernel
	yields = 64                   // then sched_yield calls, each followed by a load
	poll   = 2 * time.Millisecond // the longest futex sleep between checks
)

// Shared (not FUTEX_PRIVATE) futex operations: the word is in a mapping
// other processes share.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

func futexWake(w *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, 1<<30, 0, 0, 0)
}

func futexWait(w *uint32, v uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(v), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func osYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
