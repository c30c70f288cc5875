//go:build !linux

package shm

import "time"

const (
	spin   = 0
	yields = 0
	poll   = time.Millisecond
)

func futexWake(*uint32)                        {}
func futexWait(*uint32, uint32, time.Duration) { time.Sleep(poll) }

func osYield() {}
