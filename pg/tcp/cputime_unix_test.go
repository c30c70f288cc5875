//go:build unix

package tcp

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) this process has used, for
// the benchmarks' cpu_us/op.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
