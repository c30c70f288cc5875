//go:build !linux

package shm

import (
	"context"

	"github.com/goddp/ddp/pg/store"
)

// Supported reports whether this platform has the shared-memory
// transport.
const Supported = false

// Setup: shared memory is Linux-only; elsewhere every link uses TCP.
func Setup(context.Context, store.Store, Config) (*World, *Layout, error) {
	return nil, nil, nil
}

func unmapAll([][]byte) {}

func releasePages([]byte) {}
