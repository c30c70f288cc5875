//go:build !linux

package tcp

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg/store"
)

const (
	shmSpin = 0
	shmPoll = time.Millisecond
)

func futexWake(*uint32)                        {}
func futexWait(*uint32, uint32, time.Duration) { time.Sleep(shmPoll) }

// setupShm: shared memory is Linux-only; elsewhere every link uses TCP.
func setupShm(context.Context, store.Store, Options, *zap.Logger) (*shmWorld, *hostLayout, error) {
	return nil, nil, nil
}

const shmSupported = false
