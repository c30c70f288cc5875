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

// switches is how many times this process's threads have given up their
// core, voluntarily (a futex sleep, a blocking read: what a hand-off
// between goroutines on parked threads or a wait in the kernel costs) and
// not, for the benchmarks' vcsw/op and ivcsw/op: unlike times, they barely
// move with the machine's load.
func switches() (voluntary, involuntary int64) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return int64(ru.Nvcsw), int64(ru.Nivcsw)
}
