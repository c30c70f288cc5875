//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// openLock opens (creating it) dir's lock file through a handle on dir,
// never through a link: Note [one run per checkpoint directory].
func openLock(dir string) (*os.File, error) {
	d, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(d)
	path := filepath.Join(dir, lockName)
	fd, err := unix.Openat(d, lockName, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link, and a lock file is never opened through one; remove it", path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a regular file with one link, so it is not a lock file a run made; remove it", path)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// tryLock takes an exclusive flock(2) on f without waiting: false when
// another open file description holds it.
func tryLock(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		}
		return false, &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
}
