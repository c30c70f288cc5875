//go:build !unix

package tcp

import "time"

// cpuTime is not measured here; cpu_us/op reads 0.
func cpuTime() time.Duration { return 0 }

// switches is not counted here; vcsw/op and ivcsw/op read 0.
func switches() (voluntary, involuntary int64) { return 0, 0 }
