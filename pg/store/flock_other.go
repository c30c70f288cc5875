//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package store

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/goddp/ddp/pg"
)

func lockFile(ctx context.Context, f *os.File, exclusive bool) error {
	return fmt.Errorf("%w: store: FileStore needs flock(2), which %s lacks", pg.ErrInvalidArgument, runtime.GOOS)
}

func unlockFile(f *os.File) error { return nil }
