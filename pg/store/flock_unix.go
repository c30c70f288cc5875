//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package store

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// lockFile takes flock(2) on f, shared or exclusive. It polls with
// LOCK_NB rather than blocking, so that ctx bounds the wait even if the
// holder (another process) is stuck.
func lockFile(ctx context.Context, f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	fd := int(f.Fd())
	pause := 100 * time.Microsecond
	for {
		err := syscall.Flock(fd, how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, 10*time.Millisecond)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func unlockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
