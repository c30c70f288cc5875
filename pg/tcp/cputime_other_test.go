//go:build !unix

package tcp

import "time"

// cpuTime is not measured here; cpu_us/op reads 0.
func cpuTime() time.Duration { return 0 }
